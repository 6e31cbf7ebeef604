"""The report of ``make bench-real`` (``bench/bench_real.py``): a real pretrained model judged before SFT, after
LoRA SFT and after Meta-Ver-RL GRPO on held-out synthetic verifications and on ProcessBench gsm8k.

Per (set, model): the parse rate (passes whose answer block the one parser reads), Rough / Meta TPR, TNR and
Balanced F1 pooled with 95% CIs clustered by problem (``eval.record_rows.pooled_metrics``; section 5.4), the
held-out mean meta reward (section 4.3); the paired differences sft - before and grpo - sft
(``eval.metrics.metric_deltas``, ``eval.stats.mean_delta_ci``). Writes ``OUT/report.{md,json}`` and ``OUT/real.png``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from verifier.judgment import load_judgments

MODELS = ("before", "sft", "grpo")


def rows_of(gold: list[Any], run_dir: Path, spec: Any) -> dict[str, Any]:
    """Parse rate, pooled Rough / Meta metrics with clustered CIs and the per-record counts of one judged run."""
    from eval.record_rows import METRICS, pooled_metrics, record_counts

    m = json.loads((run_dir / "metrics.json").read_text())
    counts = record_counts(gold, run_dir / "heldout" / "judgments.jsonl")
    pooled = pooled_metrics(gold, [counts], spec)
    return {"n": len(gold), "parse_rate": 1.0 - m["parse_failure_rate"], "reward": m.get("mean_reward"),
            "per_record_reward": m["per_record_reward"], "counts": counts,
            **{k: (pooled[k]["value"], *(pooled[k]["ci"] or [None, None])) for k in METRICS}}


def report(cfg: Any, out: Path, sets: dict[str, list[Any]], timings: dict[str, float]) -> dict[str, Any]:
    """The tables, the paired differences, the plot and the last line's values."""
    from eval.metrics import metric_deltas
    from eval.stats import BootstrapSpec, mean_delta_ci

    spec = BootstrapSpec(n=cfg.bootstrap_n, seed=cfg.seed)
    rows = {s: {m: rows_of(gold, out / m / s, spec) for m in MODELS if (out / m / s / "metrics.json").is_file()}
            for s, gold in sets.items()}
    deltas: dict[str, Any] = {}
    for s, gold in sets.items():
        pids, r = [t.problem_id for t in gold], rows[s]
        for a, b in (("sft", "before"), ("grpo", "sft")):
            if a in r and b in r:
                d = metric_deltas([r[a]["counts"]], [r[b]["counts"]], pids, spec)
                deltas[f"{s}:{a}-{b}"] = {**d, "reward": mean_delta_ci(r[a]["per_record_reward"],
                                                                       r[b]["per_record_reward"], pids, spec)}
    syn = rows["synthetic"]
    values = {"parse_rate_before": syn["before"]["parse_rate"], "parse_rate_after": syn["sft"]["parse_rate"],
              "rough_f1_before": syn["before"]["rough.balanced_f1"][0],
              "rough_f1_after": syn["sft"]["rough.balanced_f1"][0],
              "rough_f1_ci_low": deltas["synthetic:sft-before"]["rough.balanced_f1"][1],
              "grpo_reward_delta": deltas["synthetic:grpo-sft"]["reward"][0],
              "grpo_delta_ci_low": deltas["synthetic:grpo-sft"]["reward"][1]}
    served = served_check(sets["synthetic"], out, spec) if (out / "served" / "synthetic" / "metrics.json").is_file() \
        else None
    doc = {"config": dataclasses.asdict(cfg), "timings_s": timings, "last_line": values, "deltas": deltas,
           "served": served,
           "rows": {s: {m: {k: v for k, v in row.items() if k != "counts"} for m, row in r.items()}
                    for s, r in rows.items()}}
    (out / "report.json").write_text(json.dumps(doc, indent=1, default=float))
    md = markdown(cfg, rows, deltas) + served_text(served)
    (out / "report.md").write_text(md)
    plot(out, rows)
    print(md)
    return values


def served_check(gold: list[Any], out: Path, spec: Any) -> dict[str, Any]:
    """The GRPO adapter served by ``verifier.serve`` (``OUT/served/synthetic``) against the same weights merged
    and judged by ``vllm.LLM`` (``OUT/grpo/synthetic``): Rough BF1 through the server, and the share of records
    whose pessimistic decision, and of passes whose verdict, are the same in both (same prompts and seeds)."""
    def judgments(d: Path) -> dict[str, Any]:
        return {j.id: j for j in load_judgments(d / "heldout" / "judgments.jsonl")}

    offline, served = judgments(out / "grpo" / "synthetic"), judgments(out / "served" / "synthetic")
    ids = [t.id for t in gold if t.id in offline and t.id in served]
    passes = [(a.verdict, b.verdict) for i in ids
              for a, b in zip(offline[i].passes, served[i].passes, strict=False)]
    r = rows_of(gold, out / "served" / "synthetic", spec)
    same = sum(offline[i].aggregate.verdict == served[i].aggregate.verdict for i in ids)
    return {"n": len(ids), "same_decision": same / len(ids)
            if ids else None, "same_pass_verdict": sum(a == b for a, b in passes) / len(passes) if passes else None,
            "parse_rate": r["parse_rate"], "rough.balanced_f1": r["rough.balanced_f1"], "reward": r["reward"]}


def served_text(served: dict[str, Any] | None) -> str:
    if not served:
        return ""
    return ("\nThe GRPO adapter served by `verifier.serve` (base model + LoRA adapter, `lora=true`) and judged through "
            f"the endpoint, synthetic held-out set: parse {pct(served['parse_rate'])}%, Rough BF1 "
            f"{ci_text(served['rough.balanced_f1'])}, mean reward {reward_text(served['reward'])}; the same "
            f"pessimistic decision as the merged weights under `vllm.LLM` on {pct(served['same_decision'])}% of "
            f"{served['n']} records ({pct(served['same_pass_verdict'])}% of passes).\n")


def pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def reward_text(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


def ci_text(t: tuple) -> str:
    return f"{pct(t[0])} [{pct(t[1])}, {pct(t[2])}]"


def markdown(cfg: Any, rows: dict[str, dict[str, Any]], deltas: dict[str, Any]) -> str:
    lines = ["# bench-real: SmolLM2-135M-Instruct learns to verify (LoRA SFT, then Meta-Ver-RL GRPO)", "",
             f"LoRA r={cfg.lora_r}: SFT {cfg.sft_steps} steps x {cfg.sft_batch} (lr {cfg.sft_lr:g}, style "
             f"{cfg.style}); GRPO {cfg.grpo_steps} steps x {cfg.grpo_batch} completions (lr {cfg.grpo_lr:g}, T "
             f"{cfg.temperature}). Judging: {cfg.eval_passes} pessimistic passes at T {cfg.eval_temperature}, "
             f"{cfg.eval_max_tokens} tokens. 95% CIs clustered by problem.", "",
             "| set | model | n | parse % | Rough TPR | Rough TNR | Rough BF1 | Meta TPR | Meta TNR | Meta BF1 | "
             "mean reward |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s, r in rows.items():
        for m, x in r.items():
            lines.append(f"| {s} | {m} | {x['n']} | {pct(x['parse_rate'])} | {pct(x['rough.tpr'][0])} | "
                         f"{pct(x['rough.tnr'][0])} | {ci_text(x['rough.balanced_f1'])} | {pct(x['meta.tpr'][0])} | "
                         f"{pct(x['meta.tnr'][0])} | {ci_text(x['meta.balanced_f1'])} | "
                         f"{reward_text(x['reward'])} |")
    lines += ["", "| difference (points) | Rough BF1 | Meta BF1 | mean reward |", "|---|---:|---:|---:|"]
    for k, d in deltas.items():
        rw = d["reward"]
        lines.append(f"| {k} | {ci_text(d['rough.balanced_f1'])} | {ci_text(d['meta.balanced_f1'])} | "
                     f"{rw[0]:+.3f} [{rw[1]:+.3f}, {rw[2]:+.3f}] |")
    return "\n".join(lines) + "\n"


def plot(out: Path, rows: dict[str, dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4))
    sft_log = out / "sft" / "sft_log.json"
    hist = json.loads(sft_log.read_text()) if sft_log.is_file() else []
    steps = [h["step"] for h in hist if "loss" in h]
    a.plot(steps, [h["loss"] for h in hist if "loss" in h], label="loss")
    a.plot(steps, [h.get("mean_token_accuracy") for h in hist if "loss" in h], label="token accuracy")
    a.set(title="LoRA SFT on training data", xlabel="step")
    a.legend()
    glog = out / "grpo" / "synthetic" / "train_log.json"
    g = json.loads(glog.read_text()) if glog.is_file() else []
    b.plot([h["step"] for h in g if "reward" in h], [h["reward"] for h in g if "reward" in h], marker="o")
    b.set(title="Meta-Ver-RL GRPO: batch reward", xlabel="step")
    width = 0.25
    for i, m in enumerate(MODELS):
        xs, ys, err = [], [], [[], []]
        for j, (s, r) in enumerate(rows.items()):
            if m in r:
                v, lo, hi = r[m]["rough.balanced_f1"]
                xs.append(j + (i - 1) * width)
                ys.append(v or 0.0)
                err[0].append(max(0.0, (v or 0.0) - (lo if lo is not None else v or 0.0)))
                err[1].append(max(0.0, (hi if hi is not None else v or 0.0) - (v or 0.0)))
        c.bar(xs, ys, width, yerr=err, label=m, capsize=3)
    c.set_xticks(range(len(rows)), list(rows))
    c.set(title="Rough Balanced F1 (95% CI)", ylim=(0, 1))
    c.legend()
    fig.tight_layout()
    fig.savefig(out / "real.png", dpi=110)
    plt.close(fig)
