"""The report of ``make bench-learning``: Rough-RL against Meta-Ver-RL GRPO from one SFT warm start with the same
budget, on held-out synthetic verifications (Table 3's reward claim, sections 4.3 and 5.4).

``write_report`` turns the evaluated runs into rows per model (held-out mean reward and its change against the warm
start, Rough / Meta TPR, TNR, Balanced F1 pooled over seeds, first-error step accuracy, copy rate), the
meta_ver_rl - rough_rl differences with CIs over problems and seeds (``eval.metrics.metric_deltas`` /
``ratio_delta``; paired seeds unless ``cfg.paired_seeds`` is false), the GRPO diagnosis (``training.diagnostics``),
and writes OUT/{report.json,report.md,learning.png,diagnostics.png}. ``write_data`` writes the records of the
comparison, ``run_data_config`` is the data every GRPO / evaluation run reads.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eval.metrics import metric_deltas, ratio_delta
from eval.record_rows import METRICS, pooled_metrics
from eval.stats import BootstrapSpec, mean_delta_ci
from training.diagnostics import copy_rate, plot_train_logs, summarize
from verifier.errors import InputError


def write_data(cfg: Any, out: Path, data: Callable[..., Any], sft_mix: dict[str, Any], tag: str = "bench-learning"
               ) -> tuple[list[Any], list[Any]]:
    """The comparison's records, written to OUT: the SFT warm start's (its own problems, seed + 1;
    OUT/sft_train.jsonl unless ``init_from``), GRPO's (seed + 2; with ``grpo_fresh_problems`` drawn from seed + 3 on
    problems of neither the SFT nor the held-out data) and the held-out records every model is judged on (seed + 2 +
    10000, disjoint ids; without problems of the SFT data or of ``exclude_problems_of``). ``data(n, seed, **mix)``:
    the ``DataConfig`` of a synthetic set. Returns (SFT records, held-out records)."""
    from training.data import load_trajectories_for
    from verifier.identity import ProblemIndex
    from verifier.io import load_trajectories, write_if_changed

    sft_trajs, _ = load_trajectories_for(data(cfg.n_sft, cfg.seed + 1, **sft_mix))
    grpo_trajs, gold = load_trajectories_for(data(cfg.n_grpo, cfg.seed + 2))  # drops held-out problems of GRPO's
    seen = [*(sft_trajs if not cfg.init_from else ()),
            *(load_trajectories(cfg.exclude_problems_of).records if cfg.exclude_problems_of else ())]
    n_gen = len(gold)
    index = ProblemIndex(seen)  # the one leak check: a problem of the SFT data by id or by text
    gold = [t for t in gold if index.shared(t) is None]
    if cfg.grpo_fresh_problems:  # RL prompts the warm start has not memorised: problems of neither SFT nor held-out
        taken = ProblemIndex([*seen, *gold])
        pool, _ = load_trajectories_for(data(cfg.grpo_fresh_pool, cfg.seed + 3))
        fresh = [t for t in pool if taken.shared(t) is None]
        if len(fresh) < cfg.n_grpo:
            raise InputError(f"only {len(fresh)} GRPO records on problems outside the SFT and held-out data: "
                             "raise grpo_fresh_pool")
        grpo_trajs = fresh[: cfg.n_grpo]
        print(f"[{tag}] GRPO: {len(grpo_trajs)} records on {len({t.problem_id for t in grpo_trajs})} "
              f"problems outside the SFT and held-out data (of {len(pool)} generated)", flush=True)
    print(f"[{tag}] held-out: {len(gold)} records ({n_gen - len(gold)} dropped: their problem occurs in the "
          "SFT data)" + ("" if seen or not cfg.init_from else "; init_from without exclude_problems_of: overlap "
                         "with the warm start's data is not checked"), flush=True)
    if len(gold) < 20:
        raise InputError(f"only {len(gold)} held-out records left after removing training problems: raise n_eval")
    if not cfg.init_from:  # a later run can start from this warm start: init_from=OUT/sft/final exclude_problems_of=this
        write_if_changed(out / "sft_train.jsonl", sft_trajs)
    write_if_changed(out / "grpo_train.jsonl", grpo_trajs)
    write_if_changed(out / "held_out.jsonl", gold)  # every model is judged on exactly these records
    return sft_trajs, gold


def run_data_config(out: Path):
    """The data of every GRPO / evaluation run of the bench: OUT/grpo_train.jsonl and all of OUT/held_out.jsonl
    (``n_train``/``n_eval`` None: no cap; 0 is rejected by the held-out check of ``training/ladder.py``)."""
    from training.config import DataConfig

    return DataConfig(source="jsonl", train_path=str(out / "grpo_train.jsonl"), eval_path=str(out / "held_out.jsonl"),
                      n_train=None, n_eval=None, prompt_template="verify_compact")


def write_report(cfg: Any, out: Path, gold, runs: dict[str, list[dict[str, Any]]], counts: dict[str, list[Any]],
                 locs: dict[str, list[Any]], seeds: list[int], arms: list[str], timings: dict[str, float]
                 ) -> dict[str, Any]:
    """``runs``: per model (base, rough_rl, meta_ver_rl) one metrics dict per seed; ``counts``, ``locs``: per model
    one ``eval.record_rows`` array per seed; ``cfg``: bench-learning's options. Prints the markdown and whether
    Table 3's ordering reproduces; returns the report."""
    spec = BootstrapSpec(n=cfg.bootstrap_n, seed=cfg.seed)
    pids = [t.problem_id for t in gold]  # every interval: eval.stats.paired_bootstrap, clustered by problem
    before = runs["base"][0]["per_record_reward"]
    rows = []
    for name in ("base", "rough_rl", "meta_ver_rl"):
        per_seed = [r["per_record_reward"] for r in runs[name]]  # [S, N]: seeds resampled with the problems
        pooled = pooled_metrics(gold, counts[name], spec)
        rows.append({"model": name, "seeds": 1 if name == "base" else len(seeds),
                     "reward": mean_delta_ci(per_seed, None, pids, spec),
                     "delta_vs_sft": mean_delta_ci(per_seed, [before], pids, spec),
                     **{k: (pooled[k]["value"], *(pooled[k]["ci"] or [None, None])) for k in METRICS},
                     "per_seed_meta_bf1": [r["meta.balanced_f1"]["value"] for r in runs[name]],
                     "copy_rate": sum(copy_rate(gold, out / (name if name == "base" else f"{name}/seed{sd}") /
                                                "heldout" / "judgments.jsonl")
                                      for sd in ([cfg.seed] if name == "base" else seeds)) / (1 if name == "base"
                                                                                               else len(seeds)),
                     "loc_acc": float(sum(x[:, 1].sum() for x in locs[name]) / max(1, sum(x[:, 0].sum()
                                                                                          for x in locs[name]))),
                     "per_seed_reward_delta": [mean_delta_ci(r, before, pids, spec) for r in per_seed],
                     "parse_failure_rate": sum(r["parse_failure_rate"] for r in runs[name]) / len(runs[name])})
    paired = cfg.paired_seeds
    deltas = metric_deltas(counts["meta_ver_rl"], counts["rough_rl"], pids, spec, paired_seeds=paired)
    unpaired = metric_deltas(counts["meta_ver_rl"], counts["rough_rl"], pids, spec)
    d_meta = deltas["meta.balanced_f1"]
    d_loc = ratio_delta(locs["meta_ver_rl"], locs["rough_rl"], pids, spec, paired_seeds=paired)
    report = {"config": dataclasses.asdict(cfg), "timings_s": timings, "rows": rows,
              "meta_vs_rough_meta_bf1": d_meta, "meta_vs_rough_loc_acc": d_loc, "meta_vs_rough": deltas,
              "meta_vs_rough_seeds": "paired" if paired else "independent",
              "meta_vs_rough_unpaired": unpaired,
              "per_seed_pair_meta_bf1_delta": [a - b for a, b in zip(rows[2]["per_seed_meta_bf1"],
                                                                      rows[1]["per_seed_meta_bf1"])],
              "train_logs": {f"{a}/seed{s}": _reward_curve(out / a / f"seed{s}") for a in arms for s in seeds}}
    hists = {f"{a}/seed{s}": _train_log(out / a / f"seed{s}") for a in arms for s in seeds}
    report["diagnosis"] = {k: summarize(h) for k, h in hists.items()}
    plot_train_logs(hists, out / "diagnostics.png", title="GRPO per step (bench-learning)")
    (out / "report.json").write_text(json.dumps(report, indent=1))
    md = _markdown(rows, cfg, d_meta, len(gold), d_loc, deltas, unpaired if paired else None)
    (out / "report.md").write_text(md)
    _plot(report, out / "learning.png")
    print(md)
    r, mv = rows[1], rows[2]
    order = ("reproduces (95% CI above 0)" if d_meta[1] is not None and d_meta[1] > 0 else
             "points the same way but is NOT significant (95% CI includes 0)" if d_meta[0] > 0 else
             "does NOT reproduce")
    print(f"Table 3 ordering (Meta-Ver-RL above Rough-RL in Meta Balanced F1) {order} here: "
          f"{_f(mv['meta.balanced_f1'][0])} vs {_f(r['meta.balanced_f1'][0])}, difference "
          f"{_pts(d_meta[0])} points, 95% CI [{_pts(d_meta[1])}, {_pts(d_meta[2])}] over problems and seeds")
    return report


def _pts(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:+.1f}"


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}"


def _markdown(rows: list[dict[str, Any]], cfg: Any, d_meta, n_records: int, d_loc=None,
              deltas: dict[str, tuple] | None = None, unpaired: dict[str, tuple] | None = None) -> str:
    lines = [(f"Held-out synthetic verification ({n_records} records, {cfg.eval_passes}-pass pessimistic judging at "
             f"T={cfg.eval_temperature}, rule meta-verifier); rough_rl and meta_ver_rl pooled over seeds "
             f"{cfg.seeds} from the same SFT warm start, {cfg.grpo_steps} GRPO steps x {cfg.grpo_batch} completions "
             "each. 95% CIs clustered by problem (reward and its delta: problems and seeds resampled)"), "",
             ("| model | seeds | mean reward | delta vs SFT | Rough TPR | Rough TNR | Rough BF1 | Meta TPR | Meta TNR |"
             " Meta BF1 | Meta BF1 per seed | step acc (rejected invalid) | reward delta per seed | parse fail |"
             " passes copying step 0 |"),
             "|---" * 15 + "|"]

    def ci(t) -> str:
        v, lo, hi = t
        return "n/a" if v is None else f"{100 * v:.1f} [{_f(lo)}, {_f(hi)}]"

    for r in rows:
        rw, d = r["reward"], r["delta_vs_sft"]
        lines.append(f"| {r['model']} | {r['seeds']} | {rw[0]:.3f} [{rw[1]:.3f}, {rw[2]:.3f}] | "
                     f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}] | "
                     f"{_f(r['rough.tpr'][0])} | {_f(r['rough.tnr'][0])} | {ci(r['rough.balanced_f1'])} | "
                     f"{_f(r['meta.tpr'][0])} | {_f(r['meta.tnr'][0])} | {ci(r['meta.balanced_f1'])} | "
                     f"{', '.join(_f(v) for v in r['per_seed_meta_bf1'])} | {_f(r['loc_acc'])} | "
                     f"{', '.join(f'{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]' for d in r['per_seed_reward_delta'])} | "
                     f"{100 * r['parse_failure_rate']:.1f}% | {100 * r.get('copy_rate', 0):.1f}% |")
    how = "seed pairs resampled together" if unpaired is not None else "seeds resampled per arm"
    lines += ["", (f"meta_ver_rl - rough_rl, Meta Balanced F1: {_pts(d_meta[0])} points, 95% CI "
              f"[{_pts(d_meta[1])}, {_pts(d_meta[2])}] (bootstrap over problems and seeds, {how})")]
    if unpaired is not None:
        u = unpaired["meta.balanced_f1"]
        lines.append(f"(the same with each arm's seeds resampled independently: 95% CI [{_pts(u[1])}, {_pts(u[2])}])")
    if d_loc is not None:
        lines.append(f"meta_ver_rl - rough_rl, first-error step accuracy among rejected invalid proofs: "
                     f"{_pts(d_loc[0])} points, 95% CI [{_pts(d_loc[1])}, {_pts(d_loc[2])}]")
    if deltas:
        lines += ["", f"| meta_ver_rl - rough_rl (points, 95% CI over problems and seeds, {how}) | "
                  + " | ".join(deltas) + " |",
                  "|---" * (len(deltas) + 1) + "|",
                  "| difference | " + " | ".join(f"{_pts(v)} [{_pts(lo)}, {_pts(hi)}]"
                                                 for v, lo, hi in deltas.values()) + " |"]
    return "\n".join(lines) + "\n"


def _train_log(run_dir: Path) -> list[dict[str, Any]]:
    p = run_dir / "train_log.json"
    return json.loads(p.read_text()) if p.exists() else []


def _reward_curve(run_dir: Path) -> list[dict[str, float]]:
    p = run_dir / "train_log.json"
    if not p.exists():
        return []
    return [{"step": h["step"], "reward": h["reward"]} for h in json.loads(p.read_text()) if "reward" in h]


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, curve in report["train_logs"].items():
        if curve:
            a.plot([c["step"] for c in curve], [c["reward"] for c in curve], marker="o", label=name,
                   color="tab:blue" if name.startswith("meta") else "tab:orange", alpha=0.8)
    a.set_xlabel("GRPO step")
    a.set_ylabel("training reward (weighted)")
    a.set_title("GRPO training reward")
    a.legend()
    names = [r["model"] for r in report["rows"]]
    x = range(len(names))
    for off, key, lab in ((-0.2, "rough.balanced_f1", "Rough BF1"), (0.2, "meta.balanced_f1", "Meta BF1")):
        vals = [r[key][0] or 0 for r in report["rows"]]
        err = [[v - (r[key][1] or v) for v, r in zip(vals, report["rows"])],
               [(r[key][2] or v) - v for v, r in zip(vals, report["rows"])]]
        b.bar([i + off for i in x], vals, width=0.4, yerr=err, label=lab, capsize=3)
    b.plot(list(x), [r["reward"][0] for r in report["rows"]], "k^-", label="mean reward")
    b.set_xticks(list(x), names)
    b.set_ylim(0, 1)
    b.set_title("held-out (95% CI)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
