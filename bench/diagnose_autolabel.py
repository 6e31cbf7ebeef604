"""`make diagnose-autolabel`: the expert-free labels (``data_pipeline.autolabel``) against exact truth.

The loop (``python -m training.loop annotator=autolabel``) can replace the expert of sections 3.1 and 4.1 by
DeepSeekMath-V2's automatic labelling: ``n`` analyses by the current verifier, ``m`` meta-checks of each reported
issue, the lowest score once ``k`` analyses are valid. Whether those labels are worth training on was never
measured. Here the synthetic task's exact checker knows every proof's truth, so the labels are measured on the
proofs a loop round labels: prover proofs of training problems (default: ``make bench-ladder``'s candidate pool,
no held-out problem), labelled with the verifier that round would use (default: bench-ladder's SFT warm start,
trained on planted errors only, as both verifier and meta-verifier, as the loop does).

One autolabel run (``n`` passes per proof, ``m`` grades per rejecting pass; resumable: its judgments file is
its state) gives every labelling compared, all from the same passes:

- ``autolabel``: the rule with ``k`` (``k_of=valid``); ``autolabel_k1`` .. ``autolabel_k<n>``: other ``k``;
  ``autolabel_lowest``: ``k_of=lowest_score``;
- ``one_pass``: the first pass alone; ``pess<n>``: all ``n`` passes must accept (no meta-check);
  ``majority<n>``: most parsed passes.

Rates (``eval.label_quality``): coverage, precision and recall of "invalid", precision of "valid" (a false proof
labelled valid teaches the verifier to accept it), exact first-step rate; 95% CIs by a bootstrap over problems,
paired across labellings (``autolabel - pess<n>``). The meta-check's discrimination: the share of rejecting
analyses it confirms when the analysis is right (a false proof, its true first step), names another step of a
false proof, or rejects a true proof. On all proofs and on the uncertainty queue (``queue``).

Writes OUT/autolabel/ (the labeller's files), OUT/label_quality.{json,png}; last line
``coverage=<r> precision_invalid=<r> recall_invalid_all=<r> precision_valid=<r> exact_first_step=<r>
pess_precision_valid=<r> pess_exact_first_step=<r> meta_confirm_right=<r> meta_confirm_other_step=<r>
meta_confirm_true_proof=<r> seconds=<n>`` (the first five: ``autolabel`` on all proofs measured). Options as
``key=value`` (``DiagnoseAutolabelConfig``); ``base_url=URL`` judges through a server already up (its model named
``served_name``) instead of serving.

``meta_sft_steps=N analyses_from=JUDGMENTS``: a verifier that cannot meta-verify (the tiny model: it was never
taught) is first taught to (DeepSeekMath-V2 trains one model for both): the proofs' problems are split at random
(``meta_train_fraction``); its analyses of the first share's proofs (a previous run's judgments), graded against the
exact checker (``training.sft.meta_sft_rows``), plus ``replay`` of its own verification SFT rows, are an SFT of
``N`` steps from ``verifier`` (OUT/meta_sft, resumed when done); then the measurement above runs with the new
model on the other share's proofs only.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import InputError, environment, last_line, run_command, set_options

environment()

LINE_KEYS = ("coverage", "precision_invalid", "recall_invalid_all", "precision_valid", "exact_first_step")
CASES = ("right", "other_step", "true_proof")  # what a rejecting analysis is, against truth


@dataclass
class DiagnoseAutolabelConfig:
    """Options of ``bench/diagnose_autolabel.py``."""

    out: str = "runs/diagnose_autolabel"
    verifier: str = "runs/bench_ladder/verifier/sft/final"  # verifier and meta-verifier (the loop's choice)
    proofs: str = "runs/bench_ladder/candidates/candidates.jsonl"  # prover proofs of training problems
    queue: str | None = "runs/bench_ladder/selection/uncertainty/annotation_queue.jsonl"  # a subset also reported
    n: int = 8
    m: int = 3
    k: int = 4
    template: str = "verify_compact"
    max_tokens: int = 112  # the verifier's passes (training.loop's verifier_max_tokens)
    meta_max_tokens: int = 112  # the meta-verifier's (the loop gives it the verifier's budget)
    temperature: float = 0.5  # the verifier's passes (the loop's autolabel temperature)
    limit: int | None = None  # the first N proofs only (a smoke run)
    seed: int = 0
    bootstrap_n: int = 1000
    base_url: str | None = None  # a server already up instead of serving ``verifier``
    served_name: str = "verifier"
    progress: bool = True
    # meta_sft_steps > 0: first teach the verifier to meta-verify (training.sft.meta_sft_rows) on its analyses of
    # the proofs of half the problems (``analyses_from``: a previous run's OUT/autolabel/judgments.jsonl), then
    # measure on the other half only
    meta_sft_steps: int = 0
    analyses_from: str | None = None
    meta_train_fraction: float = 0.5  # of the proofs' problems (seeded split by problem)
    replay_from: str | None = "runs/bench_ladder/verifier/sft_train.jsonl"  # verification rows kept in the mix
    replay: int = 1200
    style: str = "stepwise"  # the replayed verification rows' gold texts (the verifier's own SFT style)
    meta_lr: float = 1e-3
    meta_batch: int = 16


def parse(argv: list[str]) -> DiagnoseAutolabelConfig:
    """``key=value`` options over the dataclass's defaults (``bench.common.set_options``); a bad one is one line."""
    cfg = set_options(DiagnoseAutolabelConfig(), argv)
    if not 1 <= cfg.k <= cfg.n or cfg.m < 1:
        raise InputError(f"need 1 <= k <= n and m >= 1, got n={cfg.n} m={cfg.m} k={cfg.k}")
    if cfg.meta_sft_steps > 0 and (cfg.base_url or not cfg.analyses_from or not 0 < cfg.meta_train_fraction < 1):
        raise InputError("meta_sft_steps>0 needs analyses_from=JUDGMENTS, no base_url, and "
                         f"0 < meta_train_fraction < 1 (got {cfg.meta_train_fraction})")
    meta = ("analyses_from", "replay_from") if cfg.meta_sft_steps > 0 else ()  # read only by the meta SFT
    for key in ("proofs", "queue", *meta) + (() if cfg.base_url else ("verifier",)):
        if getattr(cfg, key) and not Path(getattr(cfg, key)).exists():
            raise InputError(f"{key}={getattr(cfg, key)} does not exist")
    return cfg


def split_problems(trajs: list[Any], fraction: float, seed: int) -> tuple[set[str], set[str]]:
    """The proofs' problems split at random (``seed``) into a meta-training share ``fraction`` and the rest."""
    import random

    problems = sorted({t.problem_id for t in trajs})
    random.Random(seed).shuffle(problems)
    cut = round(len(problems) * fraction)
    return set(problems[:cut]), set(problems[cut:])


def meta_sft(cfg: DiagnoseAutolabelConfig, trajs: list[Any], train_problems: set[str], d: Path) -> dict[str, Any]:
    """Teach the verifier to meta-verify its own analyses: every rejecting analysis (``analyses_from``) of the
    meta-training problems' proofs and as many accepting ones (seeded), graded against the exact checker
    (``training.sft.meta_sft_rows``), with ``replay`` of the verifier's own SFT rows so that it keeps verifying;
    SFT from ``verifier``. Resumed when ``d/final`` is there."""
    import random

    from datasets import Dataset

    from training.config import DataConfig, ModelConfig
    from training.sft import SFTRunConfig, meta_sft_rows, sft_dataset, sft_train
    from verifier.formats import load_any
    from verifier.judgment import Judgment
    from verifier.records import Verdict
    from verifier.results import WandbConfig
    from verifier.runner import read_rows

    done = d / "meta_sft.json"
    if done.is_file() and (d / "final").is_dir():
        print(f"meta-sft: resumed ({d / 'final'})", flush=True)
        return json.loads(done.read_text())
    by_id = {t.id: t for t in trajs if t.problem_id in train_problems}
    rejecting, accepting = [], []
    for pid, row in read_rows(cfg.analyses_from).items():  # type: ignore[arg-type]
        if pid in by_id:
            for p in Judgment.from_row(row).passes:
                if p.ok:
                    (rejecting if p.verdict is Verdict.INVALID else accepting).append((by_id[pid], p))
    rng = random.Random(cfg.seed)
    accepting = rng.sample(accepting, min(len(accepting), len(rejecting)))
    rows = meta_sft_rows(rejecting + accepting)
    replay = load_any(cfg.replay_from).records if cfg.replay_from else []  # type: ignore[arg-type]
    replay = rng.sample(list(replay), min(cfg.replay, len(replay)))
    mixed = rows + sft_dataset(replay, cfg.style, template=cfg.template).to_list()
    rng.shuffle(mixed)
    grades = Counter(r["completion"][0]["content"].rsplit("grade: ", 1)[1].split()[0] for r in rows)
    final = sft_train(SFTRunConfig(
        wandb=WandbConfig(enabled=False), output_dir=str(d), model=ModelConfig(name_or_path=cfg.verifier),
        data=DataConfig(source="jsonl", prompt_template=cfg.template), style=cfg.style,
        max_steps=cfg.meta_sft_steps, per_device_train_batch_size=cfg.meta_batch, learning_rate=cfg.meta_lr,
        warmup_steps=5, max_length=640, logging_steps=25, seed=cfg.seed, gradient_accumulation_steps=1, bf16=False,
        save_steps=0), [], dataset=Dataset.from_list(mixed))
    info = {"verifier": str(final), "meta_rows": len(rows), "rejecting": len(rejecting), "accepting": len(accepting),
            "replay_rows": len(replay), "grades": dict(grades), "train_problems": len(train_problems)}
    done.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return info


def labellings(rows: dict[str, dict[str, Any]], cfg: DiagnoseAutolabelConfig) -> dict[str, dict[str, tuple[str, int]]]:
    """Every labelling compared, per proof id: (decision, first error step), all from the same passes."""
    from data_pipeline.autolabel import analyses_of, label_proof
    from verifier.aggregate import AggregationPolicy, aggregate
    from verifier.judgment import Judgment

    def agg(passes: list[Any], policy: AggregationPolicy) -> tuple[str, int]:
        a = aggregate(passes, policy)
        if a.n_accept + a.n_reject == 0:
            return ("undecided", -1)
        return (a.verdict.value, a.first_error_step)  # type: ignore[union-attr]

    out: dict[str, dict[str, tuple[str, int]]] = {}

    def put(name: str, pid: str, lab: tuple[str, int]) -> None:
        out.setdefault(name, {})[pid] = lab

    for pid, row in rows.items():
        if row.get("status") == "too_long":
            continue  # undecided in every labelling
        analyses = analyses_of(row, cfg.m)
        for k in range(1, cfg.n + 1):
            lab = label_proof(analyses, k)
            put("autolabel" if k == cfg.k else f"autolabel_k{k}", pid, (lab.decision, lab.first_error_step))
        lab = label_proof(analyses, cfg.k, k_of="lowest_score")
        put("autolabel_lowest", pid, (lab.decision, lab.first_error_step))
        passes = Judgment.from_row(row).passes
        put("one_pass", pid, agg(passes[:1], AggregationPolicy(n=1, unparseable="ignore")))
        put(f"pess{cfg.n}", pid, agg(passes, AggregationPolicy(n=cfg.n, unparseable="ignore")))
        put(f"majority{cfg.n}", pid, agg(passes, AggregationPolicy("majority", n=cfg.n, unparseable="ignore")))
    return out


def meta_discrimination(rows: dict[str, dict[str, Any]], truth: dict[str, tuple[bool, int]],
                        problems: dict[str, str], cfg: DiagnoseAutolabelConfig) -> dict[str, Any]:
    """The share of rejecting analyses the meta-check confirms, by what the analysis is (``CASES``), CIs over
    problems: a meta-check worth its cost confirms ``right`` analyses far more often than ``true_proof`` ones."""
    import numpy as np

    from data_pipeline.autolabel import analyses_of, confirmed
    from eval.stats import BootstrapSpec, bootstrap_sums, percentile_ci, safe_ratio
    from verifier.records import Verdict

    per, clusters = [], []
    for pid, row in rows.items():
        valid, step = truth[pid]
        for a in analyses_of(row, cfg.m):
            if a.verdict is not Verdict.INVALID or None in a.grades:
                continue
            case = "true_proof" if valid else "right" if a.first_error_step == step else "other_step"
            ok = confirmed(a.grades)
            per.append([float(case == c) for c in CASES] + [float(case == c and ok) for c in CASES])
            clusters.append(problems[pid])
    if not per:
        return {c: {"analyses": 0, "confirmed": None, "ci": None} for c in CASES}
    v = np.array(per)
    boot = bootstrap_sums(v, clusters, BootstrapSpec(n=cfg.bootstrap_n, seed=cfg.seed))
    s = v.sum(0)
    out = {}
    for i, c in enumerate(CASES):
        rate = safe_ratio(s[3 + i], s[i])
        out[c] = {"analyses": int(s[i]), "confirmed": None if np.isnan(rate) else float(rate),
                  "ci": None if boot is None else percentile_ci(safe_ratio(boot[:, 3 + i], boot[:, i]))}
    r, o = out["right"]["confirmed"], out["other_step"]["confirmed"]  # M2: the same draws for both rates
    out["right - other_step"] = {"value": None if r is None or o is None else r - o, "ci": None if boot is None else
                                 percentile_ci(safe_ratio(boot[:, 3], boot[:, 0]) - safe_ratio(boot[:, 4], boot[:, 1]))}
    return out


def plot(result: dict[str, Any], names: list[str], path: Path) -> None:
    """Bars: each rate of each labelling (all proofs) with its 95% CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from eval.label_quality import RATES

    fig, ax = plt.subplots(figsize=(11, 4.2))
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        vals = [result[name][r]["value"] or 0.0 for r in RATES]
        cis = [result[name][r]["ci"] or (None, None) for r in RATES]
        err = [[v - (lo if lo is not None else v) for v, (lo, _) in zip(vals, cis)],
               [(hi if hi is not None else v) - v for v, (_, hi) in zip(vals, cis)]]
        ax.bar([i + j * width for i in range(len(RATES))], vals, width, yerr=err, capsize=2, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(RATES))], RATES)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("rate (95% CI over problems)")
    ax.set_title(f"labels against exact truth: {result['proofs']} prover proofs, {result['problems']} problems")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> None:
    cfg = parse(argv)
    t0 = time.monotonic()
    from data_pipeline.autolabel import AutolabelConfig, synthetic_truth
    from data_pipeline.autolabel import run as autolabel
    from eval.label_quality import measure_ci
    from eval.stats import BootstrapSpec
    from verifier.config import EndpointConfig, JudgeConfig, MetaVerifierConfig
    from verifier.formats import load_any
    from verifier.io import write_jsonl
    from verifier.runner import read_rows
    from verifier.serve import ServeConfig, VLLMServer, free_port

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    trajs = load_any(cfg.proofs).records[:cfg.limit]
    meta_info = None
    if cfg.meta_sft_steps > 0:  # teach meta-verification on half the problems, measure on the other half
        train_problems, test_problems = split_problems(trajs, cfg.meta_train_fraction, cfg.seed)
        meta_info = meta_sft(cfg, trajs, train_problems, out / "meta_sft")
        cfg.verifier = meta_info["verifier"]
        trajs = [t for t in trajs if t.problem_id in test_problems]
    proofs = out / "proofs.jsonl"
    write_jsonl(proofs, [t.to_dict() for t in trajs])
    server = None
    if cfg.base_url is None:
        server = VLLMServer(ServeConfig(model=cfg.verifier, served_model_name=cfg.served_name, port=free_port(),
                                        api_key=None, log_file=str(out / "vllm-verifier.log"), max_model_len=1024,
                                        max_num_batched_tokens=1024, seed=cfg.seed)).start()
    ep = EndpointConfig(base_url=cfg.base_url or server.base_url, model=cfg.served_name, max_concurrency=64,
                        timeout_s=300, max_retries=2)
    try:
        summary = autolabel(AutolabelConfig(
            trajectories=str(proofs), out=str(out / "autolabel"), endpoint=ep,
            judge=JudgeConfig(n=cfg.n, policy="pessimistic", early_stop=False, with_reference=False,
                              template=cfg.template, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                              run_seed=cfg.seed),
            meta=MetaVerifierConfig(kind="llm", endpoint=ep, temperature=1.0, template="meta_verify_analysis",
                                    max_tokens=cfg.meta_max_tokens, run_seed=cfg.seed),
            n=cfg.n, m=cfg.m, k=cfg.k, truth="synthetic", progress=cfg.progress,
            meta_probe=0))  # the meta-verifier's grades are what is measured here: never refused
    finally:
        if server is not None:
            server.stop()
    rows = read_rows(out / "autolabel" / "judgments.jsonl")  # raw rows: the meta grades ride along
    truth = {t.id: tr for t in trajs if (tr := synthetic_truth(t)) is not None}
    problems = {t.id: t.problem_id for t in trajs}
    labs = labellings(rows, cfg)
    pess = f"pess{cfg.n}"
    order = ["autolabel", pess, "one_pass", f"majority{cfg.n}", "autolabel_lowest",
             *[f"autolabel_k{k}" for k in range(1, cfg.n + 1) if k != cfg.k]]
    spec = BootstrapSpec(n=cfg.bootstrap_n, seed=cfg.seed)
    queue_ids = ({json.loads(x)["id"] for x in Path(cfg.queue).read_text().splitlines() if x.strip()}
                 if cfg.queue else set())
    result: dict[str, Any] = {
        "config": vars(cfg), "meta_sft": meta_info, "autolabel_summary": summary, "truth_unknown": len(trajs) - len(truth),
        "all": measure_ci({n: labs.get(n, {}) for n in order}, truth, problems, spec, versus=("autolabel", pess)),
        "meta_discrimination": meta_discrimination({i: r for i, r in rows.items() if i in truth}, truth, problems, cfg),
    }
    in_queue = {i: v for i, v in truth.items() if i in queue_ids}
    if in_queue:
        result["queue"] = measure_ci({n: labs.get(n, {}) for n in order[:5]}, in_queue, problems, spec,
                                     versus=("autolabel", pess))
    (out / "label_quality.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    plot(result["all"], order[:5], out / "label_quality.png")
    a, p, md = result["all"]["autolabel"], result["all"][pess], result["meta_discrimination"]
    last_line({**{k: a[k]["value"] for k in LINE_KEYS}, "pess_precision_valid": p["precision_valid"]["value"],
               "pess_exact_first_step": p["exact_first_step"]["value"],
               "meta_confirm_right": md["right"]["confirmed"], "meta_confirm_other_step": md["other_step"]["confirmed"],
               "meta_confirm_true_proof": md["true_proof"]["confirmed"],
               "seconds": int(time.monotonic() - t0)}, formats={"seconds": "d"})


if __name__ == "__main__":
    run_command("diagnose-autolabel", lambda: main(sys.argv[1:]))
