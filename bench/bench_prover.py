"""`make bench-prover`: a prover trained with the served verifier as its reward, and how much of its gain is real.

On the synthetic task every proof's truth is known exactly (``data_pipeline.synthetic_check``), so the
verifier's acceptance can be compared with the truth (issue 25 item 3):

1. the tiny model (the demo's size), SFT'd on the task's gold proofs (``Step k:`` format, B.1 prompt) for 800
   steps, to a true accuracy above 0 and well below 100% (the prover ``before``);
2. the verifier: ``verifier=DIR`` (e.g. the demo's ``runs/demo/grpo/final``), else the tiny model SFT'd on gold
   verifications here with the demo's data recipe (``training/sft.py``, ``style=check``, 300 steps; errors it is
   taught: a step starting from the wrong value, a wrong stated answer, 10-20 off; it was never shown a wrong
   operation result such as ``5 + 3 = 9``: a blind spot a prover can exploit), served by vLLM
   (``verifier.serve``, ``verify_compact`` prompt);
3. GRPO on the same trainer (``training/grpo.py`` with ``prover.enabled``, i.e. ``experiment=prover_rl``) from
   the SFT prover, one arm per pass policy of the verifier reward: ``pass1`` (1 pass), ``mean8`` (mean of 8),
   ``pess8`` (all 8 must accept), and ``gold`` (the exact checker as reward, the upper bound);
4. every model on the same held-out problems (disjoint from training): held-out ProverBench (generation with
   ``vllm.LLM`` on the saved prover, 8-pass pessimistic judging by the served verifier, ``refine_rounds``
   refine rounds), true correctness by the exact checker, hacking rate = accepted but false / all proofs.

Per-step acceptance, true correctness and hacking of each arm come from the reward's own logs
(``prover/*`` in ``train_log.json``). Writes ``runs/bench_prover/{report.json,report.md,prover.png}``.
Options as ``key=value`` (see ``BenchConfig``). Last line, exactly:
``true_acc_before=<r> true_acc_after=<r> accept_after=<r> hacking_rate=<r> gold_reward_true_acc_after=<r> refine_gain=<r>``
(``after``: the ``pess8`` arm; ``refine_gain``: its held-out acceptance after ``refine_rounds`` rounds minus after 0,
by the served verifier; the true-correctness counterpart is in the report).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import environment, last_line

environment(wandb=True)


@dataclass
class BenchConfig:
    out: str = "runs/bench_prover"
    seed: int = 0
    # model (the demo's tiny model, configs/demo.yaml)
    hidden_size: int = 128
    num_layers: int = 2
    intermediate_size: int = 384
    # task (the demo's synthetic knobs: 3-step chains of one-digit operands)
    min_steps: int = 3
    max_steps: int = 3
    max_operand: int = 9
    subjects: str = "arithmetic"
    n_prover_sft: int = 2000  # problems for the prover's SFT on gold proofs
    n_grpo: int = 256  # GRPO problems (fresh)
    n_eval: int = 60  # held-out problems asked for (disjoint from every training set; 45 remain with these knobs)
    # prover SFT: enough steps for a true accuracy above 0 and well below 100% (make diagnose-prover, on the GRPO
    # problems, greedy: 0% through 500 steps, 1.6% at 600, 9.4% at 800; docs/prover.md)
    prover_sft_steps: int = 800
    prover_sft_lr: float = 3e-3
    sft_batch: int = 16
    # verifier (step 2)
    verifier: str = ""  # a trained verifier folder (e.g. runs/demo/grpo/final); empty: SFT one here
    n_verifier_sft: int = 3600
    # parsed passes at judge_temperature 0.5: 74% after 100 steps, 98% after 200, 100% after 300 (docs/prover.md)
    verifier_sft_steps: int = 300
    verifier_sft_lr: float = 3e-3
    verifier_template: str = "verify_compact"
    verifier_max_tokens: int = 112
    # the demo's evaluation temperature: at 1.0, 8-14% of the SFT verifier's passes do not parse and it accepts
    # 62% of gold proofs per pass (86% at 0.5); make diagnose-prover, docs/prover.md
    judge_temperature: float = 0.5
    # GRPO arms (the same budget for each). From the diagnosis (docs/prover.md): with 4 samples per problem a group
    # had a mixed gold reward in 19/64 problems, and 8 steps x 4 prompts gave ~1 such group per step: nothing moved
    # (the first run). 8 samples per problem give 21/64 mixed groups at T = 0.5; 48 steps x 4 prompts x 8 fit the
    # time (a verifier-reward step ~8 s here).
    arms: str = "pass1,mean8,pess8,gold"
    grpo_steps: int = 48
    grpo_batch: int = 32
    num_generations: int = 8
    grpo_lr: float = 1e-4
    max_completion_length: int = 64
    # the prover's sampling temperature in GRPO: groups of 8 with a mixed gold reward (a gradient), GRPO problems:
    # 10/64 at 1.0, 16/64 at 0.7, 21/64 at 0.5 (make diagnose-prover, docs/prover.md)
    temperature: float = 0.5
    # held-out evaluation
    eval_passes: int = 8
    eval_temperature: float = 0.5
    refine_rounds: int = 1
    bootstrap_n: int = 200


ARMS = {"pass1": ("verifier", 1, "pessimistic"), "mean8": ("verifier", 8, "mean"),
        "pess8": ("verifier", 8, "pessimistic"), "gold": ("gold", 8, "pessimistic")}


def _overrides(argv: list[str], cfg: BenchConfig) -> BenchConfig:
    kw: dict[str, Any] = {}
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    for a in argv:
        k, _, v = a.partition("=")
        if k not in fields:
            raise SystemExit(f"unknown option {k!r}; known: {', '.join(fields)}")
        typ = type(getattr(cfg, k))
        kw[k] = typ(v) if typ is not bool else v.lower() in ("1", "true", "yes")
    cfg = dataclasses.replace(cfg, **kw)
    bad = [a for a in cfg.arms.split(",") if a not in ARMS]
    if bad or "pess8" not in cfg.arms.split(","):
        raise SystemExit(f"arms: use a subset of {list(ARMS)} that includes pess8 (got {cfg.arms!r})")
    return cfg


def main(argv: list[str] | None = None) -> None:
    cfg = _overrides(sys.argv[1:] if argv is None else argv, BenchConfig())
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from datasets import Dataset

    from data_pipeline.synthetic_check import gold_proof, proof_text
    from training.config import (
        DataConfig,
        EvalConfig,
        GRPORunConfig,
        GRPOSettings,
        ModelConfig,
        WandbSettings,
    )
    from training.grpo import run
    from training.prover_reward import ProverRLConfig, problem_rows, synthetic_problems
    from training.sft import SFTRunConfig, sft_train
    from verifier.results import WandbConfig  # bench runs log no W&B (SFT's default: on)
    from verifier.config import EndpointConfig
    from verifier.judging import JudgeConfig
    from verifier.serve import ServeConfig, VLLMServer, free_port
    from verifier.tiny_model import TinyModelConfig, build

    t_start = time.monotonic()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}

    def tick(name: str, t0: float) -> None:
        timings[name] = round(time.monotonic() - t0, 1)
        print(f"[bench-prover] {name}: {timings[name]:.0f}s (total {time.monotonic() - t_start:.0f}s)", flush=True)

    task = {"min_steps": cfg.min_steps, "max_steps": cfg.max_steps, "max_operand": cfg.max_operand,
            "recoverable_rate": 0.0, "qe_fraction": 0.0, "subjects": cfg.subjects.split(",")}
    t0 = time.monotonic()
    model_dir = build(TinyModelConfig(out=str(out / "model"), seed=cfg.seed, hidden_size=cfg.hidden_size,
                                      num_layers=cfg.num_layers, intermediate_size=cfg.intermediate_size))
    tick("build model", t0)

    # problems: prover SFT (seed+1), GRPO (seed+2), held-out (seed+3); held-out problems occur in no training set
    sft_problems = synthetic_problems(cfg.n_prover_sft, cfg.seed + 1, **task)
    grpo_problems = synthetic_problems(cfg.n_grpo, cfg.seed + 2, **task)
    seen = {p.problem for p in sft_problems + grpo_problems}
    held_all = synthetic_problems(cfg.n_eval * 4, cfg.seed + 3, **task)
    held = [p for p in held_all if p.problem not in seen][: cfg.n_eval]
    grpo_problems = [p for p in grpo_problems if p.problem not in {q.problem for q in sft_problems}]
    print(f"[bench-prover] problems: {len(sft_problems)} prover SFT, {len(grpo_problems)} GRPO, {len(held)} held-out "
          f"({len(held_all) - len(held)} held-out candidates dropped or unused; the task has few distinct problems)",
          flush=True)
    if len(held) < 20:
        raise SystemExit(f"only {len(held)} held-out problems: raise max_operand or n_eval")
    from verifier.io import write_jsonl

    write_jsonl(out / "grpo_problems.jsonl", [dataclasses.asdict(p) for p in grpo_problems])
    write_jsonl(out / "held_out_problems.jsonl", [dataclasses.asdict(p) for p in held])

    # 1. the prover: SFT on gold proofs
    t0 = time.monotonic()
    rows = problem_rows(sft_problems)
    for r, p in zip(rows, sft_problems):
        r["completion"] = [{"role": "assistant", "content": proof_text(gold_proof(p.problem))}]
    ds = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])
    prover_sft = sft_train(SFTRunConfig(wandb=WandbConfig(enabled=False),
        output_dir=str(out / "prover_sft"), model=ModelConfig(name_or_path=str(model_dir)),
        max_steps=cfg.prover_sft_steps, per_device_train_batch_size=cfg.sft_batch, learning_rate=cfg.prover_sft_lr,
        warmup_steps=5, max_length=512, logging_steps=10, seed=cfg.seed, gradient_accumulation_steps=1, bf16=False,
        save_steps=0), [], dataset=ds)
    tick("prover SFT", t0)

    # 2. the verifier
    t0 = time.monotonic()
    if cfg.verifier:
        verifier_dir = Path(cfg.verifier)
        if not (verifier_dir / "config.json").is_file():
            raise SystemExit(f"verifier={cfg.verifier}: not a model folder (no config.json)")
    else:
        from training.data import load_trajectories_for

        vdata = DataConfig(source="synthetic", n_train=cfg.n_verifier_sft, n_eval=0, seed=cfg.seed + 4,
                           prompt_template=cfg.verifier_template,
                           synthetic={**task, "fatal_kinds": ["wrong_operand", "wrong_final"],  # the demo's recipe
                                      "error_delta_min": 10, "error_delta_max": 20, "problem_id_from_text": True})
        vtrain, _ = load_trajectories_for(vdata)
        verifier_dir = sft_train(SFTRunConfig(wandb=WandbConfig(enabled=False),
            output_dir=str(out / "verifier_sft"), model=ModelConfig(name_or_path=str(model_dir)), data=vdata,
            style="check", max_steps=cfg.verifier_sft_steps, per_device_train_batch_size=cfg.sft_batch,
            learning_rate=cfg.verifier_sft_lr, warmup_steps=5, max_length=512, logging_steps=25, seed=cfg.seed,
            gradient_accumulation_steps=1, bf16=False, save_steps=0), vtrain)
        tick("verifier SFT", t0)
    server = VLLMServer(ServeConfig(model=str(verifier_dir), served_model_name="verifier", port=free_port(),
                                    api_key=None, log_file=str(out / "vllm-verifier.log"), max_model_len=2048,
                                    max_num_batched_tokens=2048)).start()
    try:
        ep = EndpointConfig(base_url=server.base_url, model="verifier", max_concurrency=64, timeout_s=300,
                            max_retries=2)
        report = _arms(cfg, out, prover_sft, ep, grpo_problems, held, tick, t_start, timings,
                       (DataConfig, EvalConfig, GRPORunConfig, GRPOSettings, ModelConfig, WandbSettings, run,
                        ProverRLConfig, JudgeConfig))
    finally:
        server.stop()
    report["timings_s"] = timings
    report["verifier"] = str(verifier_dir)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    md = _markdown(report, cfg)
    (out / "report.md").write_text(md)
    _plot(report, out / "prover.png")
    print(md)
    print(f"wrote {out / 'report.md'}, {out / 'prover.png'}; total {time.monotonic() - t_start:.0f}s")
    last_line(line_values(report))


def line_values(report: dict[str, Any]) -> dict[str, float | None]:
    """The values of the bench's last line (``None``: ``nan``, no gold-reward arm or no refinement measured)."""
    b, a, g = report["rows"]["before"], report["rows"]["pess8"], report["rows"].get("gold")
    return {"true_acc_before": b["true_acc"], "true_acc_after": a["true_acc"], "accept_after": a["accept"],
            "hacking_rate": a["hacking_rate"], "gold_reward_true_acc_after": g["true_acc"] if g else None,
            "refine_gain": a["refine_gain"]}


def _arms(cfg: BenchConfig, out: Path, prover_sft: Path, ep, grpo_problems, held, tick, t_start, timings, api):
    (DataConfig, EvalConfig, GRPORunConfig, GRPOSettings, ModelConfig, WandbSettings, run, ProverRLConfig,
     JudgeConfig) = api
    from eval.stats import BootstrapSpec
    from training.config import heldout_judge

    # the prover's held-out sampling (eval.judge: the evaluated model's; training.config.EvalConfig)
    ev = EvalConfig(judge=dataclasses.replace(heldout_judge(), max_tokens=cfg.max_completion_length,
                                              temperature=cfg.eval_temperature, run_seed=cfg.seed),
                    bootstrap=BootstrapSpec(n=cfg.bootstrap_n, seed=cfg.seed), progress=False)
    data = DataConfig(source="synthetic", n_train=len(grpo_problems), n_eval=len(held), seed=cfg.seed)

    def prover_cfg(reward: str, n: int, policy: str) -> Any:
        judge = JudgeConfig(n=n, policy="pessimistic", with_reference=False, template=cfg.verifier_template,
                            max_tokens=cfg.verifier_max_tokens, temperature=cfg.judge_temperature,
                            run_seed=cfg.seed)
        return ProverRLConfig(enabled=True, reward=reward, policy=policy,
                              problems=str(out / "grpo_problems.jsonl"), eval_problems=str(out / "held_out_problems.jsonl"),
                              verifier=ep, judge=judge, eval_passes=cfg.eval_passes,
                              eval_refine_rounds=cfg.refine_rounds)

    def run_cfg(name: str, train: bool, reward: str, n: int, policy: str) -> Any:
        return GRPORunConfig(
            experiment_name=name, output_dir=str(out / name), train=train, init_from=str(prover_sft),
            model=ModelConfig(name_or_path=str(prover_sft)), data=data,
            grpo=GRPOSettings(max_steps=cfg.grpo_steps, per_device_train_batch_size=cfg.grpo_batch,
                              num_generations=cfg.num_generations, max_completion_length=cfg.max_completion_length,
                              learning_rate=cfg.grpo_lr, temperature=cfg.temperature, save_steps=10_000, beta=0.0,
                              gradient_accumulation_steps=1, warmup_steps=0, bf16=False, logging_steps=1,
                              seed=cfg.seed, log_completions=False),
            eval=ev, wandb=WandbSettings(enabled=False), prover=prover_cfg(reward, n, policy))

    rows: dict[str, Any] = {}
    curves: dict[str, Any] = {}
    t0 = time.monotonic()
    rows["before"] = _row(run(run_cfg("before", False, "verifier", 8, "pessimistic")))
    tick("before = SFT prover (held-out eval)", t0)
    for arm in cfg.arms.split(","):
        reward, n, policy = ARMS[arm]
        t0 = time.monotonic()
        doc = run(run_cfg(arm, True, reward, n, policy))
        rows[arm] = _row(doc)
        curves[arm] = _curve(out / arm)
        tick(f"{arm} (GRPO + held-out eval)", t0)
    return {"config": dataclasses.asdict(cfg), "rows": rows, "curves": curves,
            "vs_before": {arm: _paired(rows["before"], rows[arm], cfg) for arm in cfg.arms.split(",")}}


def _paired(before: dict[str, Any], after: dict[str, Any], cfg: BenchConfig) -> dict[str, Any]:
    """after - before on the same held-out proofs (problem, sample): accepted, true, hacked, each with a paired
    bootstrap CI clustered by problem (a problem's samples resampled together; ``eval.stats.mean_delta_ci``)."""
    from eval.stats import BootstrapSpec, mean_delta_ci

    keys = sorted(set(before["per_proof"]) & set(after["per_proof"]))
    if not keys:
        return {"n": 0}
    problems = [k.rsplit("/", 1)[0] for k in keys]  # per_proof keys are "problem/sample"
    out: dict[str, Any] = {"n": len(keys), "problems": len(set(problems))}
    spec = BootstrapSpec(n=max(cfg.bootstrap_n, 1000), seed=cfg.seed)
    for name, f in (("accept", lambda v: v[1]), ("true_acc", lambda v: v[0]), ("hacking_rate", lambda v: v[1] * (1 - v[0]))):
        d, lo, hi = mean_delta_ci([f(after["per_proof"][k]) for k in keys], [f(before["per_proof"][k]) for k in keys],
                                  problems, spec)
        out[name] = {"delta": d, "ci": [lo, hi]}
    return out


def _row(doc: dict[str, Any]) -> dict[str, Any]:
    """Held-out figures of one model: acceptance (8-pass pessimistic), truth, hacking, refine gain."""
    g = doc["gold"]
    refine = doc.get("refine") or {}
    return {"accept": g["round0"]["accept"], "accept_ci": doc["acceptance"]["overall"].get("ci"),
            "true_acc": g["round0"]["true_acc"], "hacking_rate": g["round0"]["hacking_rate"], "n": g["round0"]["n"],
            "accept_refined": g["refined"]["accept"], "true_acc_refined": g["refined"]["true_acc"],
            "refine_gain": refine.get("gain"),
            "refine_true_gain": g["refined"]["true_acc"] - g["round0"]["true_acc"],
            "train": (doc.get("run") or {}).get("train", {}).get("prover_reward"),
            "per_proof": g["round0"].get("per_proof", {})}


def _curve(run_dir: Path) -> list[dict[str, float]]:
    """Per-step acceptance, true correctness and hacking from the reward's logs."""
    path = run_dir / "train_log.json"
    if not path.exists():
        return []
    out = []
    for e in json.loads(path.read_text()):
        if "prover/true_rate" in e or "prover/accept_rate" in e:
            out.append({"step": e.get("step"), "accept": e.get("prover/accept_rate"), "true": e.get("prover/true_rate"),
                        "hacking": e.get("prover/hacking_rate"), "reward": e.get("reward")})
    return out


def _f(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _markdown(report: dict[str, Any], cfg: BenchConfig) -> str:
    lines = ["# bench-prover: a prover trained against the served verifier, and how much of its gain is real", "",
             (f"Held-out: {report['rows']['before']['n']} proofs (one per problem, problems disjoint from training), "
             f"accepted = all {cfg.eval_passes} passes of the served verifier accept; true = the exact checker; "
             "hacking = accepted but false (share of all proofs). Arms: GRPO from the SFT prover with the same budget "
             f"({cfg.grpo_steps} steps x {cfg.grpo_batch} completions, {cfg.num_generations} per problem), seed {cfg.seed}, "
             "one seed per arm."), "",
             ("| model | accepted % | true % | hacking % | accepted after refine % | true after refine % | "
             "refine gain (acc, pts) | refine gain (true, pts) |"), "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in report["rows"].items():
        lines.append(f"| {name} | {_f(r['accept'])} | {_f(r['true_acc'])} | {_f(r['hacking_rate'])} | "
                     f"{_f(r['accept_refined'])} | {_f(r['true_acc_refined'])} | {_f(r['refine_gain'])} | "
                     f"{_f(r['refine_true_gain'])} |")
    lines += ["", "Change against the SFT prover on the same held-out proofs (points, paired bootstrap 95% CI clustered by problem):",
              "", "| arm | accepted | true | hacking |", "|---|---:|---:|---:|"]
    for arm, v in report.get("vs_before", {}).items():
        if v.get("n"):
            lines.append(f"| {arm} | " + " | ".join(
                f"{100 * v[k]['delta']:+.1f} [{100 * v[k]['ci'][0]:+.1f}, {100 * v[k]['ci'][1]:+.1f}]"
                for k in ("accept", "true_acc", "hacking_rate")) + " |")
    lines += ["", "Per step (training batches, from the reward's logs): first -> last step", ""]
    for arm, c in report["curves"].items():
        if c:
            lines.append(f"- {arm}: accepted {_f(c[0]['accept'])} -> {_f(c[-1]['accept'])}, true {_f(c[0]['true'])} "
                         f"-> {_f(c[-1]['true'])}, hacking {_f(c[0]['hacking'])} -> {_f(c[-1]['hacking'])}")
    lines += ["", "Timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in report.get("timings_s", {}).items()), ""]
    return "\n".join(lines)


def _plot(report: dict[str, Any], path: Path) -> None:
    from verifier.results import figure, save_figure

    fig, _axes = figure((10.0, 3.6))
    fig.clf()
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for i, (arm, c) in enumerate(report["curves"].items()):
        if not c:
            continue
        steps = [e["step"] for e in c]
        ax1.plot(steps, [100 * (e["true"] or 0) for e in c], "-", color=f"C{i}", label=f"{arm} true")
        ax1.plot(steps, [100 * (e["hacking"] or 0) for e in c], ":", color=f"C{i}", label=f"{arm} hacking")
    ax1.set_xlabel("GRPO step")
    ax1.set_ylabel("% of the step's completions")
    ax1.legend(fontsize=6)
    names = list(report["rows"])
    x = range(len(names))
    for k, (key, lab) in enumerate([("accept", "accepted"), ("true_acc", "true"), ("hacking_rate", "hacking")]):
        ax2.bar([i + 0.27 * (k - 1) for i in x], [100 * report["rows"][n][key] for n in names], width=0.27,
                label=lab, color=f"C{k}")
    ax2.set_xticks(list(x), names)
    ax2.set_ylabel("held-out %")
    ax2.set_ylim(0, 100)
    ax2.legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
