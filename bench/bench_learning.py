"""`make bench-learning`: does GRPO with the meta reward really learn on a CPU? (section 4.3, Table 3)

On the synthetic verification task (``data_pipeline.synthetic``): build a small local model,
SFT warm start on gold verifications (``training/sft.py``), then GRPO from the SFT model with
the Meta-Ver-RL reward (rule-based meta-verifier) and, side by side, with the Rough-RL reward.
Every model is evaluated on the same held-out trajectories (problems disjoint from training),
``eval.samples`` sampled verifications each at the training temperature, by the one held-out path of
``training/grpo.py`` (``eval.verifierbench`` with ``vllm.LLM`` on each saved checkpoint):

* held-out mean reward (meta grade per sample, unparseable = 0) before and after GRPO, with a
  paired bootstrap CI of the difference over held-out records;
* Rough and Meta Balanced F1 (``eval.metrics``, problem-clustered bootstrap CIs);
* Rough-RL against Meta-Ver-RL on the same numbers.

Writes ``runs/bench_learning/{report.json,report.md,learning.png}``. Options as ``key=value``
(see ``BenchConfig``). Last line, exactly:
``reward_before=<x> reward_after=<y> delta_ci_low=<lower 95% bound of y - x>``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@dataclass
class BenchConfig:
    out: str = "runs/bench_learning"
    seed: int = 0
    # model
    hidden_size: int = 128
    num_layers: int = 2
    intermediate_size: int = 384
    # task
    n_sft: int = 560
    n_grpo: int = 256
    n_eval: int = 96
    min_steps: int = 3
    max_steps: int = 3
    max_operand: int = 9
    fatal_kinds: str = "wrong_operand,wrong_final"
    # SFT
    sft_steps: int = 70
    sft_batch: int = 8
    sft_lr: float = 3e-3
    style: str = "minimal"
    # GRPO
    grpo_steps: int = 50
    grpo_batch: int = 32  # completions per step (B x G)
    num_generations: int = 8
    grpo_lr: float = 3e-4
    format_weight: float = 1.0  # format component added to both rewards (composable weights)
    beta: float = 0.04  # KL coefficient to the SFT model
    max_completion_length: int = 40
    temperature: float = 1.0
    # eval
    eval_samples: int = 6
    bootstrap_n: int = 1000
    skip_rough: bool = False


def _overrides(argv: list[str], cfg: BenchConfig) -> BenchConfig:
    types = {f.name: f.type for f in dataclasses.fields(cfg)}
    for a in argv:
        k, _, v = a.partition("=")
        if k not in types:
            raise SystemExit(f"unknown option {k!r}; options: {', '.join(types)}")
        cur = getattr(cfg, k)
        setattr(cfg, k, v.lower() in ("1", "true", "yes") if isinstance(cur, bool) else type(cur)(v))
    return cfg


def paired_delta_ci(before: list[float], after: list[float], n: int = 1000, seed: int = 0,
                    level: float = 0.95) -> tuple[float, float, float]:
    """Mean of after - before and its percentile bootstrap CI over records (paired)."""
    import numpy as np

    d = np.asarray(after, float) - np.asarray(before, float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(d), size=(n, len(d)))
    means = d[idx].mean(axis=1)
    a = (1 - level) / 2
    return float(d.mean()), float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def mean_ci(values: list[float], n: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    import numpy as np

    v = np.asarray(values, float)
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(n, len(v)))].mean(axis=1)
    return float(v.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def main(argv: list[str] | None = None) -> None:
    cfg = _overrides(sys.argv[1:] if argv is None else argv, BenchConfig())
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from training.grpo import DataConfig, EvalConfig, GRPORunConfig, GRPOSettings, ModelConfig, WandbSettings, run
    from training.rewards import RewardConfig
    from training.sft import SFTRunConfig, sft_train
    from verifier.tiny_model import TinyModelConfig, build

    t_start = time.monotonic()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}

    def tick(name: str, t0: float) -> None:
        timings[name] = round(time.monotonic() - t0, 1)
        print(f"[bench-learning] {name}: {timings[name]:.0f}s (total {time.monotonic() - t_start:.0f}s)", flush=True)

    t0 = time.monotonic()
    model_dir = build(TinyModelConfig(out=str(out / "model"), seed=cfg.seed, hidden_size=cfg.hidden_size,
                                      num_layers=cfg.num_layers, intermediate_size=cfg.intermediate_size))
    tick("build model", t0)
    task = {"min_steps": cfg.min_steps, "max_steps": cfg.max_steps, "max_operand": cfg.max_operand,
            "recoverable_rate": 0.0, "qe_fraction": 0.0, "fatal_kinds": cfg.fatal_kinds.split(",")}

    def data(n_train: int, seed: int) -> DataConfig:
        return DataConfig(source="synthetic", n_train=n_train, n_eval=cfg.n_eval, seed=seed,
                          prompt_template="verify_compact", synthetic=dict(task))

    # SFT warm start: its own problems (seed + 1); GRPO: seed + 2; held-out: seed + 2 + 10000 (disjoint ids)
    t0 = time.monotonic()
    from training.grpo import load_trajectories_for

    sft_trajs, _ = load_trajectories_for(data(cfg.n_sft, cfg.seed + 1))
    sft_cfg = SFTRunConfig(output_dir=str(out / "sft"), model=ModelConfig(name_or_path=str(model_dir)),
                           data=data(cfg.n_sft, cfg.seed + 1), style=cfg.style, max_steps=cfg.sft_steps,
                           per_device_train_batch_size=cfg.sft_batch, learning_rate=cfg.sft_lr, warmup_steps=5,
                           max_length=512, logging_steps=10, seed=cfg.seed,
                           gradient_accumulation_steps=1, bf16=False)  # CPU (the dataclass defaults are GPU values)
    sft_model = sft_train(sft_cfg, sft_trajs)
    tick("SFT", t0)

    ev = EvalConfig(n_passes=cfg.eval_samples, aggregation="majority", max_new_tokens=cfg.max_completion_length, temperature=cfg.temperature,
                    bootstrap_n=cfg.bootstrap_n, seed=cfg.seed)

    def run_cfg(name: str, train: bool, components: dict[str, float]) -> GRPORunConfig:
        return GRPORunConfig(
            experiment_name=name, output_dir=str(out / name), train=train, init_from=str(sft_model),
            model=ModelConfig(name_or_path=str(sft_model)), data=data(cfg.n_grpo, cfg.seed + 2),
            reward=RewardConfig(components=components, meta_judge="rule"),
            grpo=GRPOSettings(max_steps=cfg.grpo_steps, per_device_train_batch_size=cfg.grpo_batch,
                              num_generations=cfg.num_generations, max_completion_length=cfg.max_completion_length,
                              learning_rate=cfg.grpo_lr, temperature=cfg.temperature, save_steps=10_000,
                              beta=cfg.beta, gradient_accumulation_steps=1, warmup_steps=0, bf16=False,
                              logging_steps=5, seed=cfg.seed, log_completions=False),
            eval=ev, wandb=WandbSettings(enabled=False))

    results: dict[str, Any] = {}

    def evaluate(name: str, train: bool, components: dict[str, float]) -> dict[str, Any]:
        t0 = time.monotonic()
        m = run(run_cfg(name, train, components))
        m["per_record_reward_mean"] = m["per_record_reward"]  # mean over the eval samples of each record
        m["single"] = m.get("per_pass", m)  # metrics with each sample as one verdict
        tick(f"{name} ({'GRPO + ' if train else ''}eval)", t0)
        return m

    results["sft"] = evaluate("sft", False, {"meta": 1.0})
    fmt = {"format": cfg.format_weight} if cfg.format_weight else {}
    results["meta_ver_rl"] = evaluate("meta_ver_rl", True, {**fmt, "meta": 1.0})
    if not cfg.skip_rough:
        results["rough_rl"] = evaluate("rough_rl", True, {**fmt, "rough": 1.0, "meta": 0.0})

    before = results["sft"]["per_record_reward_mean"]
    rows = []
    for name, m in results.items():
        mr = mean_ci(m["per_record_reward_mean"], cfg.bootstrap_n, cfg.seed)
        d = paired_delta_ci(before, m["per_record_reward_mean"], cfg.bootstrap_n, cfg.seed)
        mets = m["single"]
        rows.append({"model": name, "reward": mr, "delta_vs_sft": d,
                     **{k: (mets[k]["value"], *(mets[k]["ci"] or [None, None]))
                        for k in ("rough.tpr", "rough.tnr", "rough.balanced_f1", "meta.tpr", "meta.tnr",
                                  "meta.balanced_f1")},
                     "parse_failure_rate": m["parse_failure_rate"]})
    report = {"config": dataclasses.asdict(cfg), "timings_s": timings, "rows": rows,
              "train_logs": {n: _reward_curve(out / n) for n in results if n != "sft"}}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    md = _markdown(rows, cfg)
    (out / "report.md").write_text(md)
    _plot(report, out / "learning.png")
    print(md)
    if not cfg.skip_rough:
        r, m = next(x for x in rows if x["model"] == "rough_rl"), next(x for x in rows if x["model"] == "meta_ver_rl")
        d = paired_delta_ci(results["rough_rl"]["per_record_reward_mean"],
                            results["meta_ver_rl"]["per_record_reward_mean"], cfg.bootstrap_n, cfg.seed)
        print(f"Meta-Ver-RL vs Rough-RL: held-out meta reward {m['reward'][0]:.3f} vs {r['reward'][0]:.3f} "
              f"(paired diff {d[0]:+.3f}, 95% CI [{d[1]:+.3f}, {d[2]:+.3f}]); Meta BF1 "
              f"{_f(m['meta.balanced_f1'][0])} vs {_f(r['meta.balanced_f1'][0])}; Rough BF1 "
              f"{_f(m['rough.balanced_f1'][0])} vs {_f(r['rough.balanced_f1'][0])}")
    print(f"wrote {out / 'report.md'}, {out / 'learning.png'}; total {time.monotonic() - t_start:.0f}s")
    meta = next(x for x in rows if x["model"] == "meta_ver_rl")
    print(f"reward_before={rows[0]['reward'][0]:.4f} reward_after={meta['reward'][0]:.4f} "
          f"delta_ci_low={meta['delta_vs_sft'][1]:.4f}")


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}"


def _markdown(rows: list[dict[str, Any]], cfg: BenchConfig) -> str:
    lines = [f"Held-out synthetic verification ({cfg.n_eval} records x {cfg.eval_samples} samples, T={cfg.temperature}); "
             "95% CIs (reward: bootstrap over records; F1: clustered by problem)", "",
             "| model | mean reward | delta vs SFT | Rough TPR | Rough TNR | Rough BF1 | Meta TPR | Meta TNR | Meta BF1 |"
             " parse fail |", "|---" * 10 + "|"]

    def ci(t) -> str:
        v, lo, hi = t
        return "n/a" if v is None else f"{100 * v:.1f} [{_f(lo)}, {_f(hi)}]"

    for r in rows:
        rw, d = r["reward"], r["delta_vs_sft"]
        lines.append(f"| {r['model']} | {rw[0]:.3f} [{rw[1]:.3f}, {rw[2]:.3f}] | {d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}] | "
                     f"{_f(r['rough.tpr'][0])} | {_f(r['rough.tnr'][0])} | {ci(r['rough.balanced_f1'])} | "
                     f"{_f(r['meta.tpr'][0])} | {_f(r['meta.tnr'][0])} | {ci(r['meta.balanced_f1'])} | "
                     f"{100 * r['parse_failure_rate']:.1f}% |")
    return "\n".join(lines) + "\n"


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
            a.plot([c["step"] for c in curve], [c["reward"] for c in curve], marker="o", label=name)
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


if __name__ == "__main__":
    main()
