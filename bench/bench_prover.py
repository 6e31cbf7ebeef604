"""`make bench-prover`: a prover trained with the served verifier as its reward, and how much of its gain is real.

On the synthetic task every proof's truth is known exactly (``data_pipeline.synthetic_check``), so the
verifier's acceptance can be compared with the truth (issue 25 item 3):

1. the tiny model (the demo's size), SFT'd on the task's gold proofs (``Step k:`` format, B.1 prompt): checkpoint
   1200 of a 2000-step schedule, 43% true at T 0.5 on training problems (the prover ``before``);
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
Options as ``key=value`` (see ``bench.common.ProverHackingConfig``). Last line, exactly:
``true_acc_before=<r> true_acc_after=<r> accept_after=<r> hacking_rate=<r> gold_reward_true_acc_after=<r> refine_gain=<r>``
(``after``: the ``pess8`` arm; ``refine_gain``: its held-out acceptance after ``refine_rounds`` rounds minus after 0,
by the served verifier; the true-correctness counterpart is in the report).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import (Clock, InputError, PROVER_ARMS, ProverHackingConfig, Servers, environment, last_line,
                          prover_options, run_command, torch_threads)

environment(wandb=True)


def main(argv: list[str] | None = None) -> None:
    cfg = prover_options(sys.argv[1:] if argv is None else argv, ProverHackingConfig())
    torch_threads()
    from datasets import Dataset

    from data_pipeline.synthetic_check import gold_proof, proof_text
    from training.config import DataConfig, EvalConfig, GRPORunConfig, GRPOSettings, ModelConfig, WandbSettings
    from training.grpo import run
    from training.prover_reward import ProverRLConfig, problem_rows
    from training.sft import SFTRunConfig, sft_train
    from verifier.results import WandbConfig  # bench runs log no W&B (SFT's default: on)
    from verifier.judging import JudgeConfig
    from verifier.tiny_model import TinyModelConfig, build

    clock = Clock("bench-prover")
    t_start, timings, tick = clock.start, clock.timings, clock.tick
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)

    task = {"min_steps": cfg.min_steps, "max_steps": cfg.max_steps, "max_operand": cfg.max_operand,
            "recoverable_rate": 0.0, "qe_fraction": 0.0, "subjects": cfg.subjects.split(",")}
    t0 = time.monotonic()
    model_dir = build(TinyModelConfig(out=str(out / "model"), seed=cfg.seed, hidden_size=cfg.hidden_size,
                                      num_layers=cfg.num_layers, intermediate_size=cfg.intermediate_size))
    tick("build model", t0)

    sft_problems, grpo_problems, held, n_candidates = problem_sets(cfg, task)
    print(f"[bench-prover] problems: {len(sft_problems)} prover SFT, {len(grpo_problems)} GRPO, {len(held)} held-out "
          f"({cfg.held_out_skip} skipped, {n_candidates - len(held) - cfg.held_out_skip} held-out candidates dropped "
          "or unused; the task has few distinct problems)", flush=True)
    if len(held) < 20:
        raise InputError(f"only {len(held)} held-out problems: raise max_operand or n_eval")
    from verifier.io import write_jsonl

    write_jsonl(out / "grpo_problems.jsonl", [dataclasses.asdict(p) for p in grpo_problems])
    write_jsonl(out / "held_out_problems.jsonl", [dataclasses.asdict(p) for p in held])

    # 1. the prover: SFT on gold proofs
    t0 = time.monotonic()
    if cfg.prover:
        prover_sft = Path(cfg.prover)
        if not (prover_sft / "config.json").is_file():
            raise InputError(f"prover={cfg.prover}: not a model folder (no config.json)")
    rows = [] if cfg.prover else problem_rows(sft_problems)
    for r, p in zip(rows, sft_problems):
        r["completion"] = [{"role": "assistant", "content": proof_text(gold_proof(p.problem))}]
    if not cfg.prover:
        ds = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])
        prover_sft = sft_train(SFTRunConfig(wandb=WandbConfig(enabled=False),
            output_dir=str(out / "prover_sft"), model=ModelConfig(name_or_path=str(model_dir)),
            max_steps=cfg.prover_sft_steps, per_device_train_batch_size=cfg.sft_batch, learning_rate=cfg.prover_sft_lr,
            warmup_steps=5, max_length=512, logging_steps=10, seed=cfg.seed, gradient_accumulation_steps=1,
            bf16=False, save_steps=cfg.prover_sft_checkpoint, save_total_limit=None), [], dataset=ds)
        if cfg.prover_sft_checkpoint:  # the warm start: a checkpoint of the schedule (make diagnose-control)
            prover_sft = out / "prover_sft" / f"checkpoint-{cfg.prover_sft_checkpoint}"
        tick("prover SFT", t0)

    # 2. the verifier (and, for the pool arm, pool_size - 1 more, each from its own random init and SFT seed)
    t0 = time.monotonic()
    vdata = DataConfig(source="synthetic", n_train=cfg.n_verifier_sft, n_eval=0, seed=cfg.seed + 4,
                       prompt_template=cfg.verifier_template,
                       synthetic={**task, "fatal_kinds": ["wrong_operand", "wrong_final"],  # the demo's recipe
                                  "error_delta_min": 10, "error_delta_max": 20, "problem_id_from_text": True})

    def verifier_sft(name: str, init: Path, seed: int) -> Path:
        from training.data import load_trajectories_for

        vtrain, _ = load_trajectories_for(vdata)
        return sft_train(SFTRunConfig(wandb=WandbConfig(enabled=False),
            output_dir=str(out / name), model=ModelConfig(name_or_path=str(init)), data=vdata,
            style="check", max_steps=cfg.verifier_sft_steps, per_device_train_batch_size=cfg.sft_batch,
            learning_rate=cfg.verifier_sft_lr, warmup_steps=5, max_length=512, logging_steps=25, seed=seed,
            gradient_accumulation_steps=1, bf16=False, save_steps=0), vtrain)

    if cfg.verifier:
        verifier_dir = Path(cfg.verifier)
        if not (verifier_dir / "config.json").is_file():
            raise InputError(f"verifier={cfg.verifier}: not a model folder (no config.json)")
    else:
        verifier_dir = verifier_sft("verifier_sft", model_dir, cfg.seed)
        tick("verifier SFT", t0)
    members = []
    if "pool" in cfg.arms.split(","):
        t0 = time.monotonic()
        for i in range(1, cfg.pool_size):
            init = build(TinyModelConfig(out=str(out / f"model_pool{i}"), seed=cfg.seed + 100 * i,
                                         hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
                                         intermediate_size=cfg.intermediate_size))
            members.append(verifier_sft(f"verifier_pool{i}", init, cfg.seed + 100 * i))
        tick(f"pool: {cfg.pool_size - 1} more verifiers (SFT)", t0)
    servers = Servers(out, 2048)
    try:
        eps = [servers.endpoint("verifier" if i == 0 else f"verifier_pool{i}", d)
               for i, d in enumerate([verifier_dir, *members])]
        report = _arms(cfg, out, prover_sft, eps, grpo_problems, held, tick, t_start, timings,
                       (DataConfig, EvalConfig, GRPORunConfig, GRPOSettings, ModelConfig, WandbSettings, run,
                        ProverRLConfig, JudgeConfig))
    finally:
        servers.stop()
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
    b, a, g = report["rows"]["before"], report["rows"].get("pess8") or {}, report["rows"].get("gold")
    return {"true_acc_before": b["true_acc"], "true_acc_after": a.get("true_acc"), "accept_after": a.get("accept"),
            "hacking_rate": a.get("hacking_rate"), "gold_reward_true_acc_after": g["true_acc"] if g else None,
            "refine_gain": a.get("refine_gain")}



def problem_sets(cfg: ProverHackingConfig, task: dict[str, Any]) -> tuple[list[Any], list[Any], list[Any], int]:
    """(prover SFT, GRPO, held-out problems, held-out candidates drawn): SFT from seed+1, GRPO from seed+2 without
    the SFT problems, held-out from seed+3 in no training set, after skipping the first ``held_out_skip`` (a fresh
    held-out set beside the one an earlier registered run read; the candidate stream is the same, so the sets are
    disjoint)."""
    from training.prover_reward import synthetic_problems

    sft = synthetic_problems(cfg.n_prover_sft, cfg.seed + 1, **task)
    grpo = synthetic_problems(cfg.n_grpo, cfg.seed + 2, **task)
    seen = {p.problem for p in sft + grpo}
    candidates = synthetic_problems((cfg.n_eval + cfg.held_out_skip) * 4, cfg.seed + 3, **task)
    held = [p for p in candidates if p.problem not in seen][cfg.held_out_skip: cfg.held_out_skip + cfg.n_eval]
    sft_text = {q.problem for q in sft}
    return sft, [p for p in grpo if p.problem not in sft_text], held, len(candidates)


def _arms(cfg: ProverHackingConfig, out: Path, prover_sft: Path, eps, grpo_problems, held, tick, t_start, timings, api):
    (DataConfig, EvalConfig, GRPORunConfig, GRPOSettings, ModelConfig, WandbSettings, run, ProverRLConfig,
     JudgeConfig) = api
    from eval.stats import BootstrapSpec
    from training.config import heldout_judge

    # the prover's held-out sampling (eval.judge: the evaluated model's; training.config.EvalConfig)
    ev = EvalConfig(judge=dataclasses.replace(heldout_judge(), max_tokens=cfg.max_completion_length,
                                              temperature=cfg.eval_temperature, run_seed=cfg.seed),
                    bootstrap=BootstrapSpec(n=cfg.bootstrap_n, seed=cfg.seed), progress=False)
    data = DataConfig(source="synthetic", n_train=len(grpo_problems), n_eval=len(held), seed=cfg.seed)

    from verifier.pool import PoolConfig

    def prover_cfg(reward: str, n: int, policy: str, pool: bool = False) -> Any:
        judge = JudgeConfig(n=n, policy="pessimistic", with_reference=False, template=cfg.verifier_template,
                            max_tokens=cfg.verifier_max_tokens, temperature=cfg.judge_temperature,
                            run_seed=cfg.seed)
        # the pool arm: every member judges its share of the passes, every pass of every member must accept (the
        # same number of judge calls per proof as pess8, in training and held out, spread over pool_size models)
        return ProverRLConfig(enabled=True, reward=reward, policy=policy,
                              problems=str(out / "grpo_problems.jsonl"), eval_problems=str(out / "held_out_problems.jsonl"),
                              verifier=eps[0], pool=PoolConfig(verifiers=list(eps[1:]) if pool else [], rule="all"),
                              judge=judge, eval_passes=cfg.eval_passes // cfg.pool_size if pool else cfg.eval_passes,
                              eval_refine_rounds=cfg.refine_rounds, eval_proofs_per_problem=cfg.eval_proofs)

    def run_cfg(name: str, train: bool, reward: str, n: int, policy: str, seed: int = cfg.seed,
                pool: bool = False) -> Any:
        return GRPORunConfig(
            experiment_name=name, output_dir=str(out / name), train=train, init_from=str(prover_sft),
            model=ModelConfig(name_or_path=str(prover_sft)), data=data,
            grpo=GRPOSettings(max_steps=cfg.grpo_steps, per_device_train_batch_size=cfg.grpo_batch,
                              num_generations=cfg.num_generations, max_completion_length=cfg.max_completion_length,
                              learning_rate=cfg.grpo_lr, temperature=cfg.temperature, save_steps=10_000, beta=0.0,
                              gradient_accumulation_steps=1, warmup_steps=0, bf16=False, logging_steps=1,
                              seed=seed, log_completions=False),
            eval=ev, wandb=WandbSettings(enabled=False), prover=prover_cfg(reward, n, policy, pool))

    rows: dict[str, Any] = {}
    curves: dict[str, Any] = {}
    t0 = time.monotonic()
    rows["before"] = _row(run(run_cfg("before", False, "verifier", 8, "pessimistic")))
    tick("before = SFT prover (held-out eval)", t0)
    seeds: dict[str, list[Any]] = {}
    for arm in cfg.arms.split(","):
        reward, n, policy = PROVER_ARMS[arm]
        n = cfg.eval_passes // cfg.pool_size if arm == "pool" else n
        per_seed = [int(x) for x in cfg.gold_seeds.split(",")] if arm == "gold" else [cfg.seed]
        for seed in per_seed:
            name = arm if len(per_seed) == 1 else f"{arm}_s{seed}"
            t0 = time.monotonic()
            seeds.setdefault(arm, []).append(_row(run(run_cfg(name, True, reward, n, policy, seed, arm == "pool"))))
            curves[name] = _curve(out / name)
            tick(f"{name} (GRPO + held-out eval)", t0)
        rows[arm] = _pooled(seeds[arm])
    return {"config": dataclasses.asdict(cfg), "rows": rows, "curves": curves,
            "per_seed": {a: [{k: v for k, v in r.items() if k != "per_proof"} for r in rs] for a, rs in seeds.items()},
            "vs_before": {arm: _paired(rows["before"], seeds[arm], cfg) for arm in cfg.arms.split(",")},
            # each other verifier-reward arm against pess8 (one seed), same held-out proofs: e.g. pool - pess8
            "vs_pess8": {arm: _paired(seeds["pess8"][0], seeds[arm], cfg) for arm in cfg.arms.split(",")
                         if "pess8" in seeds and arm not in ("pess8", "gold")}}


def _pooled(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's row over its seeds: the mean of each rate; ``per_proof`` keeps every seed (a list per proof)."""
    if len(rows) == 1:
        return rows[0]
    keys = ("accept", "true_acc", "hacking_rate", "accept_refined", "true_acc_refined", "refine_gain", "refine_true_gain")
    out = {k: (None if any(r[k] is None for r in rows) else sum(r[k] for r in rows) / len(rows)) for k in keys}
    out.update(n=rows[0]["n"], seeds=len(rows), accept_ci=None, train=[r["train"] for r in rows],
               per_proof={p: [r["per_proof"][p] for r in rows] for p in rows[0]["per_proof"]})
    return out


def _paired(before: dict[str, Any], after: list[dict[str, Any]], cfg: ProverHackingConfig) -> dict[str, Any]:
    """after - before on the same held-out proofs (problem, sample): accepted, true, hacked, each with a paired
    bootstrap CI clustered by problem (a problem's samples resampled together, and the arm's GRPO seeds
    resampled with them when it has several; ``eval.stats.mean_delta_ci``)."""
    from eval.stats import BootstrapSpec, mean_delta_ci

    keys = sorted(set(before["per_proof"]).intersection(*(r["per_proof"] for r in after)))
    if not keys:
        return {"n": 0}
    problems = [k.rsplit("/", 1)[0] for k in keys]  # per_proof keys are "problem/sample"
    out: dict[str, Any] = {"n": len(keys), "problems": len(set(problems)), "seeds": len(after)}
    spec = BootstrapSpec(n=max(cfg.bootstrap_n, 1000), seed=cfg.seed)
    for name, f in (("accept", lambda v: v[1]), ("true_acc", lambda v: v[0]), ("hacking_rate", lambda v: v[1] * (1 - v[0]))):
        a = [[f(r["per_proof"][k]) for k in keys] for r in after]
        d, lo, hi = mean_delta_ci(a if len(a) > 1 else a[0], [f(before["per_proof"][k]) for k in keys], problems, spec)
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


def _delta_rows(deltas: dict[str, Any]) -> list[str]:
    """One table row per arm: accepted, true and hacking differences in points with their CIs."""
    return [f"| {arm} | " + " | ".join(f"{100 * v[k]['delta']:+.1f} [{100 * v[k]['ci'][0]:+.1f}, {100 * v[k]['ci'][1]:+.1f}]"
                                      for k in ("accept", "true_acc", "hacking_rate")) + " |"
            for arm, v in deltas.items() if v.get("n")]


def _markdown(report: dict[str, Any], cfg: ProverHackingConfig) -> str:
    lines = ["# bench-prover: a prover trained against the served verifier, and how much of its gain is real", "",
             (f"Held-out: {report['rows']['before']['n']} proofs ({cfg.eval_proofs} per problem, problems disjoint "
             f"from training), accepted = all {cfg.eval_passes} passes of the served verifier accept; true = the exact "
             "checker; hacking = accepted but false (share of all proofs). Arms: GRPO from the SFT prover with the same "
             f"budget ({cfg.grpo_steps} steps x {cfg.grpo_batch} completions, {cfg.num_generations} per problem, lr "
             f"{cfg.grpo_lr:g}), seed {cfg.seed}; the gold arm (the positive control) with GRPO seeds {cfg.gold_seeds}, "
             "its row the mean over them."), "",
             ("| model | accepted % | true % | hacking % | accepted after refine % | true after refine % | "
             "refine gain (acc, pts) | refine gain (true, pts) |"), "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in report["rows"].items():
        lines.append(f"| {name} | {_f(r['accept'])} | {_f(r['true_acc'])} | {_f(r['hacking_rate'])} | "
                     f"{_f(r['accept_refined'])} | {_f(r['true_acc_refined'])} | {_f(r['refine_gain'])} | "
                     f"{_f(r['refine_true_gain'])} |")
    lines += ["", "Change against the SFT prover on the same held-out proofs (points, paired bootstrap 95% CI clustered by problem):",
              "", "| arm | accepted | true | hacking |", "|---|---:|---:|---:|"]
    lines += _delta_rows(report.get("vs_before", {}))
    if any(v.get("n") for v in report.get("vs_pess8", {}).values()):
        lines += ["", "Against the pess8 arm on the same held-out proofs (each arm accepted by its own judge; points, "
                  "paired bootstrap 95% CI clustered by problem):", "", "| arm - pess8 | accepted | true | hacking |",
                  "|---|---:|---:|---:|"]
        lines += _delta_rows(report["vs_pess8"])
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
    run_command("bench-prover", main)
