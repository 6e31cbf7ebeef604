"""How the 8-pass step rule shapes item 4's localisation numbers (issue 23; exploratory, docs/training.md).

Pessimistic judging (section 4.4) rejects a proof when any of the n passes rejects it, and
``verifier.aggregate`` reports the *earliest* step a rejecting pass names. When a verifier names a wrong step
on some passes (item 4's warm start is trained on targets that do, half of its invalid ones), the earliest of
8 is often a wrong, earlier step: the 8-pass Meta numbers then measure whether any pass named an earlier step
more than how well the verifier localises. This script re-reads a ``bench/bench_learning.py`` output folder
(no generation, no training) and reports, for base, rough_rl and meta_ver_rl and as meta_ver_rl - rough_rl
with bootstrap CIs over problems and seed pairs (``eval.metrics.metric_deltas`` /
``ratio_delta`` on ``eval.stats.paired_bootstrap``):

* ``per_pass``: every pass scored as a verdict of its own (Meta TPR / TNR / BF1 over passes) and the
  exact-step accuracy of the rejecting passes on invalid proofs;
* ``earliest``: the 8-pass pessimistic verdict with the earliest step (what the bench reports);
* ``most_named``: the same verdict with the step most rejecting passes name (ties: the earliest of them;
  ``judge.step_rule=most_named``, ``verifier.aggregate``).

Usage: ``python bench/step_rule.py out=runs/item4_copy_seed2/localisation``. Writes ``OUT/step_rule.json``; last line
``per_pass_meta_f1_delta=<r> per_pass_meta_f1_ci_low=<r> earliest_meta_f1_delta=<r> ... step_acc_ci_low=<r>``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import InputError, last_line, run_command, set_options

from eval.metrics import metric_deltas, ratio_delta
from eval.record_rows import RULES, meta_values, step_rows
from eval.stats import BootstrapSpec, safe_ratio
from verifier.io import load_trajectories
from verifier.judgment import load_judgments


@dataclass
class StepRuleOptions:
    """``key=value`` options (``bench.common.set_options``): the bench-learning folder and the bootstrap size."""
    out: str = "runs/item4_copy_seed2/localisation"
    bootstrap_n: int = 1000


def main(argv: list[str] | None = None) -> None:
    args = set_options(StepRuleOptions(), sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    if not (out / "report.json").is_file():
        raise InputError(f"out={out}: no report.json (the folder of a finished bench/bench_learning.py run, "
                         "e.g. runs/item4_copy_seed2/localisation)")
    report = json.loads((out / "report.json").read_text())
    seeds = [int(s) for s in report["config"]["seeds"].split(",")]
    gold = load_trajectories(out / "held_out.jsonl").records
    runs = {"base": [out / "base"], **{a: [out / a / f"seed{s}" for s in seeds] for a in ("rough_rl", "meta_ver_rl")}}
    rows = {a: [step_rows(gold, load_judgments(d / "heldout" / "judgments.jsonl")) for d in ds] for a, ds in runs.items()}
    spec = BootstrapSpec(n=args.bootstrap_n, seed=int(report["config"]["seed"]))
    pids = [t.problem_id for t in gold]
    result: dict[str, Any] = {"models": {}, "meta_vs_rough": {}}
    for a, per_seed in rows.items():
        loc = np.sum([r["loc"].sum(0) for r in per_seed], axis=0)
        result["models"][a] = {r: meta_values([x[r] for x in per_seed]) for r in RULES}
        result["models"][a]["per_pass"]["step_acc"] = float(safe_ratio(loc[1], loc[0]))
    A, B = rows["meta_ver_rl"], rows["rough_rl"]
    for r in RULES:
        d = metric_deltas([x[r] for x in A], [x[r] for x in B], pids, spec, paired_seeds=True)
        result["meta_vs_rough"][r] = {k: d[k] for k in ("meta.tnr", "meta.balanced_f1")}
    result["meta_vs_rough"]["per_pass"]["step_acc"] = ratio_delta(
        [x["loc"] for x in A], [x["loc"] for x in B], pids, spec, paired_seeds=True)
    (out / "step_rule.json").write_text(json.dumps(result, indent=1))
    def pct(v: float) -> str:
        return f"{100 * v:.1f}"

    print(f"{out}: {len(gold)} held-out records, seeds {seeds}; Meta TNR / Meta BF1 by step rule")
    for a, m in result["models"].items():
        print(f"  {a:12s} " + "  ".join(f"{r}: {pct(m[r]['meta.tnr'])} / {pct(m[r]['meta.balanced_f1'])}" for r in RULES)
              + f"  per-pass step acc {pct(m['per_pass']['step_acc'])}")
    for r, d in result["meta_vs_rough"].items():
        print(f"  meta - rough, {r}: " + "  ".join(f"{k} {100 * v[0]:+.1f} [{100 * v[1]:+.1f}, {100 * v[2]:+.1f}]"
                                                  for k, v in d.items()))
    last_line(line_values(result))


def line_values(result: dict[str, Any]) -> dict[str, float | None]:
    """The script's last line: meta_ver_rl - rough_rl in Meta BF1 under each step rule with its CI's lower bound,
    then in the rejecting passes' exact-step accuracy."""
    d, acc = result["meta_vs_rough"], result["meta_vs_rough"]["per_pass"]["step_acc"]
    return {**{f"{r}_meta_f1_{k}": d[r]["meta.balanced_f1"][i] for r in RULES for k, i in (("delta", 0), ("ci_low", 1))},
            "step_acc_delta": acc[0], "step_acc_ci_low": acc[1]}


if __name__ == "__main__":
    run_command("step-rule", main)
