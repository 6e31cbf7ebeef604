"""`make diagnose-control`: a positive control for the prover bench, chosen on training problems only.

``make bench-prover``'s gold arm (GRPO with the exact checker as reward) did not learn (4.4% -> 6.7% held-out,
CI across 0), so the bench had no positive control: nothing showed that GRPO on this prover *can* raise true
accuracy when the reward is right. Two causes are possible, and this diagnosis measures both on the bench's
GRPO problems (never the held-out set), with ``bench/bench_prover.py``'s task, model and problem seeds:

1. **the SFT budget** (a gradient needs groups with a mixed reward): the prover SFT'd on gold proofs to
   ``prover_sft_steps``, a checkpoint every ``every`` steps; at each checkpoint from ``from_step`` on, the true
   rate of ``num_generations`` samples per dev problem at the GRPO temperature and the number of groups whose gold
   reward is mixed. The checkpoint with the most mixed groups is the warm start (fewest mixed groups: no gradient;
   all true: nothing to learn);
2. **the learning rate**: from that warm start, gold-reward GRPO (the bench's budget: ``grpo_steps`` x
   ``grpo_batch``, ``num_generations`` per problem, ``temperature``, beta 0) for each lr in ``lrs``; the dev true
   rate after vs before (paired by problem, ``eval.stats.mean_delta_ci``, clustered by problem) and the training
   batches' true rate (first vs last quarter of the steps, from the reward's logs). The chosen lr is the one with
   the highest lower CI bound of the dev gain.

Dev problems: ``n_problems`` of the bench's GRPO problems (seed + 2), in neither the prover's SFT set nor any
diagnosis GRPO run; the remaining GRPO problems train. The held-out problems are not read.

``recipe=loop`` diagnoses ``make bench-loop``'s prover instead (``training.loop``): its SFT data (gold proofs plus
revision and repair prompts, ``synthetic_recipes.prover_sft_rows``) and its problem sets (``training.loop.
problem_sets`` at bench-loop's sizes: 200 held-out, 64 per round, 2 rounds): GRPO trains on round 0's problems, dev
is rounds 1 and 2's (training problems of the loop; its held-out problems are not read). With the loop's
``prover_sft_steps`` the final checkpoint is the loop's SFT prover. ``warm``: the warm starts of step 2,
comma-separated SFT steps or ``best`` (the checkpoint with the most mixed groups). Generation is Hugging
Face ``generate`` (``training.diagnostics.hf_samples``). Resumable: the SFT and each (lr, batch, steps) GRPO run
are skipped when their final weights are there. Writes OUT/control[_loop]_b<grpo_batch>_s<grpo_steps>[_r..][_g..][_w..]
.{json,png} (the suffixes: ``train_rounds``, ``grpo_seed``, ``warm`` when given); last line
``control_sft_steps=<n> control_lr=<r> dev_true_before=<r> dev_true_after=<r> dev_gain=<r> dev_gain_ci_low=<r>
seconds=<n>``. Options as ``key=value``: every ``bench.common.ProverHackingConfig`` field plus ``every``, ``n_problems``, ``from_step``
``lrs`` (comma-separated), ``recipe`` (gold | loop), ``warm``, ``train_rounds`` (the loop's rounds whose
problems GRPO trains on, comma-separated, not 1 or 2: default 0) and ``grpo_seed`` (GRPO's seed, default the prover
seed; given, the runs and the summary are named ``..._g<seed>`` and reuse the SFT checkpoints and dev samples: a
GRPO-seed replicate of the same start) and ``train_samples`` (true: at each checkpoint also sample the GRPO problems,
``num_generations`` each, for their true rate and the problems solved reliably, at least half the samples true,
before any GRPO). Each checkpoint's ``reliable`` counts the same on the dev problems. A ``warm`` other than ``best``
adds ``_w<steps>`` to the summary's name. ``warm=reliable`` (with ``train_samples=true``): among the
checkpoints with at least 3% of the GRPO problems solved reliably, the one with the most mixed dev groups
(``reliable_start``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import (InputError, ProverHackingConfig, environment, last_line, prover_options, run_command,
                          split_options)

environment(wandb=True)


@dataclasses.dataclass
class ControlOptions:
    """The diagnosis's own options, beside bench-prover's (``ProverHackingConfig``)."""
    every: int = 400
    n_problems: int = 48
    from_step: int = 800
    lrs: str = "1e-4,3e-4,1e-3"
    recipe: str = "gold"
    warm: str = "best"
    train_rounds: str = "0"
    grpo_seed: Optional[int] = None  # GRPO's seed (sampling, data order); None: the prover seed (``seed``)
    train_samples: bool = False  # also sample the GRPO problems at each checkpoint: their true rate, reliable problems


LINE_FORMATS = {"control_sft_steps": "d", "control_lr": "g", "seconds": "d"}


def parse(argv: list[str]) -> tuple[ProverHackingConfig, dict[str, str]]:
    opts, rest = split_options(argv, ControlOptions())
    cfg = prover_options(rest, ProverHackingConfig(out="runs/diagnose_control"))
    own = {k: str(v) for k, v in dataclasses.asdict(opts).items()}
    every, n, frm, lrs = opts.every, opts.n_problems, opts.from_step, opts.lrs.split(",")
    try:
        [float(x) for x in lrs]
    except ValueError as e:
        raise InputError(f"lrs: numbers separated by commas ({e})") from None
    if every < 1 or n < 8 or not 0 < frm <= cfg.prover_sft_steps:
        raise InputError(f"every >= 1, n_problems >= 8, 0 < from_step <= prover_sft_steps (got {every}, {n}, {frm})")
    if own["recipe"] not in ("gold", "loop"):
        raise InputError(f"recipe: gold (bench-prover's SFT and problems) or loop (bench-loop's); got {own['recipe']!r}")
    for w in own["warm"].split(","):
        if w == "reliable" and not opts.train_samples:
            raise InputError("warm=reliable reads the GRPO problems' samples: set train_samples=true")
        if w not in ("best", "reliable") and not (w.isdigit() and frm <= int(w) <= cfg.prover_sft_steps and
                                (int(w) % every == 0 or int(w) == cfg.prover_sft_steps)):
            raise InputError(f"warm: 'best', 'reliable' or SFT steps among the checkpoints (multiples of every={every} from "
                             f"from_step={frm} to prover_sft_steps={cfg.prover_sft_steps}), comma-separated; got {w!r}")
    rounds = own["train_rounds"].split(",")
    if not all(r.isdigit() and int(r) not in (1, 2) for r in rounds) or len(set(rounds)) != len(rounds):
        raise InputError(f"train_rounds: distinct loop rounds other than the dev rounds 1 and 2, comma-separated; got "
                         f"{own['train_rounds']!r}")
    return cfg, own


def problems(cfg: ProverHackingConfig, recipe: str, n_dev: int, train_rounds: str = "0"
             ) -> tuple[list[Any], list[Any], list[Any], Any]:
    """The prover's SFT problems, GRPO problems and dev problems, and the SFT rows' builder, of ``recipe`` (the loop's:
    GRPO on the problems of ``train_rounds``, dev on rounds 1 and 2's)."""
    from data_pipeline.synthetic_check import gold_proof, proof_text
    from training.prover_reward import problem_rows, synthetic_problems

    if recipe == "loop":
        from data_pipeline.synthetic_recipes import prover_sft_rows
        from training.loop import LoopConfig, problem_sets

        rounds = [int(r) for r in train_rounds.split(",")]
        sets = problem_sets(LoopConfig(seed=cfg.seed, n_prover_sft=cfg.n_prover_sft, n_heldout=200,
                                       n_round_problems=64, min_steps=cfg.min_steps, max_steps=cfg.max_steps,
                                       max_operand=cfg.max_operand), rounds=max([2, *rounds]))
        return (sets["prover SFT"], [p for r in rounds for p in sets[f"round {r}"]],
                sets["round 1"] + sets["round 2"], lambda ps: prover_sft_rows(ps, cfg.seed + 1))

    def gold_rows(ps: list[Any]) -> list[dict[str, Any]]:
        return [{"prompt": r["prompt"], "completion": [{"role": "assistant", "content": proof_text(gold_proof(p.problem))}]}
                for r, p in zip(problem_rows(ps), ps)]

    task = {"min_steps": cfg.min_steps, "max_steps": cfg.max_steps, "max_operand": cfg.max_operand,
            "recoverable_rate": 0.0, "qe_fraction": 0.0, "subjects": cfg.subjects.split(",")}
    sft_problems = synthetic_problems(cfg.n_prover_sft, cfg.seed + 1, **task)  # the bench's seeds
    seen = {p.problem for p in sft_problems}
    grpo_all = [p for p in synthetic_problems(cfg.n_grpo, cfg.seed + 2, **task) if p.problem not in seen]
    return sft_problems, grpo_all[n_dev:], grpo_all[:n_dev], gold_rows


def main(argv: list[str] | None = None) -> None:
    cfg, own = parse(sys.argv[1:] if argv is None else argv)
    every, n_dev, from_step = int(own["every"]), int(own["n_problems"]), int(own["from_step"])
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from datasets import Dataset

    from data_pipeline.synthetic_check import check_proof
    from training.config import ModelConfig
    from training.diagnostics import hf_samples
    from training.prover_reward import problem_rows
    from training.sft import SFTRunConfig, sft_train
    from verifier.io import write_jsonl
    from verifier.results import WandbConfig, figure, save_figure
    from verifier.templates import split_proof_steps
    from verifier.tiny_model import TinyModelConfig, build

    t_start = time.monotonic()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    recipe = own["recipe"]
    sft_problems, train, dev, sft_rows = problems(cfg, recipe, n_dev, own["train_rounds"])
    print(f"[control] {recipe} recipe: {len(sft_problems)} SFT, {len(train)} GRPO, {len(dev)} dev problems (training "
          "problems; the held-out set is not read)", flush=True)
    write_jsonl(out / "train_problems.jsonl", [dataclasses.asdict(p) for p in train])
    write_jsonl(out / "dev_problems.jsonl", [dataclasses.asdict(p) for p in dev])
    k = cfg.num_generations
    dev_rep = [p for p in dev for _ in range(k)]

    def sample_truth(model_dir: Path, probs: list[Any], tag: str) -> list[int]:
        """The exact truth of ``num_generations`` samples per problem of ``probs`` at the GRPO temperature (kept
        beside the weights as ``<tag>_true_...json``: resumable)."""
        cache = Path(model_dir) / f"{tag}_true_{recipe}_n{len(probs)}_seed{cfg.seed}.json"
        if cache.is_file():
            return json.loads(cache.read_text())
        rep = [p for p in probs for _ in range(k)]
        texts = hf_samples(model_dir, [r["prompt"] for r in problem_rows(probs) for _ in range(k)], cfg.temperature,
                           cfg.max_completion_length, seed=cfg.seed)
        t = [int(check_proof(p.problem, split_proof_steps(t)).true) for p, (t, _f) in zip(rep, texts)]
        cache.write_text(json.dumps(t))
        return t

    def dev_true(model_dir: Path) -> list[int]:
        return sample_truth(model_dir, dev, "dev")

    # 1. prover SFT budget -> dev true rate and mixed groups at the GRPO temperature
    sft_dir = out / "prover_sft"
    if not (sft_dir / "final" / "config.json").is_file():
        model_dir = build(TinyModelConfig(out=str(out / "model"), seed=cfg.seed, hidden_size=cfg.hidden_size,
                                          num_layers=cfg.num_layers, intermediate_size=cfg.intermediate_size))
        ds = Dataset.from_list(sft_rows(sft_problems))
        sft_train(SFTRunConfig(wandb=WandbConfig(enabled=False), output_dir=str(sft_dir),
            model=ModelConfig(name_or_path=str(model_dir)), max_steps=cfg.prover_sft_steps,
            per_device_train_batch_size=cfg.sft_batch, learning_rate=cfg.prover_sft_lr, warmup_steps=5,
            max_length=512, logging_steps=50, seed=cfg.seed, gradient_accumulation_steps=1, bf16=False,
            save_steps=every, save_total_limit=None), [], dataset=ds)
    ckpts = {int(c.name.split("-")[1]): c for c in sft_dir.glob("checkpoint-*")}
    ckpts[cfg.prover_sft_steps] = sft_dir / "final"
    doc: dict[str, Any] = {"config": dataclasses.asdict(cfg), "options": own, "dev_problems": len(dev),
                           "train_problems": len(train), "sft": [], "lrs": []}
    per_ckpt: dict[int, list[int]] = {}
    for step in sorted(s for s in ckpts if s >= from_step):
        t = dev_true(ckpts[step])
        per_ckpt[step] = t
        groups = [t[i:i + k] for i in range(0, len(t), k)]
        doc["sft"].append({"step": step, "dev_true": sum(t) / len(t), "mixed_groups": sum(0 < sum(g) < k for g in groups),
                           "groups": len(groups), "reliable": reliable(t, k)})
        if own["train_samples"] == "True":  # the same on the GRPO problems themselves, before any GRPO
            tt = sample_truth(ckpts[step], train, "train")
            doc["sft"][-1] |= {"train_true": sum(tt) / len(tt), "train_reliable": reliable(tt, k),
                               "train_groups": len(tt) // k}
        e = doc["sft"][-1]
        print(f"[control] SFT step {step}: dev true {100 * e['dev_true']:.1f}% at T {cfg.temperature}, groups with a "
              f"gradient {e['mixed_groups']}/{len(groups)}, solved reliably {e['reliable']}"
              + (f"; GRPO problems: true {100 * e['train_true']:.1f}%, solved reliably {e['train_reliable']}/"
                 f"{e['train_groups']}" if "train_true" in e else ""), flush=True)
    best = max(doc["sft"], key=lambda e: (e["mixed_groups"], -e["step"]))  # most gradient; ties: the earlier
    doc["warm_start"] = best["step"]
    doc["reliable_start"] = reliable_start(doc["sft"]) if own["train_samples"] == "True" else None
    if "reliable" in own["warm"].split(","):
        print(f"[control] warm=reliable: {doc['reliable_start'] or 'no checkpoint'} (at least {RELIABLE_MIN:.0%} of the "
              "GRPO problems solved reliably; among those, the most mixed dev groups)", flush=True)
    warms = warm_starts(own["warm"], best["step"], doc["reliable_start"])
    clusters = [p.id for p in dev_rep]

    # 2. gold-reward GRPO from each warm start, one run per learning rate
    tags = (f"_r{own['train_rounds'].replace(',', '-')}" if own["train_rounds"] != "0" else "") + seed_tag(own)
    for step in warms:
        before = per_ckpt[step]
        for lr in own["lrs"].split(","):
            # bench-prover's folder names for its one warm start; the loop recipe's name theirs
            name = f"grpo_lr{lr}_b{cfg.grpo_batch}_s{cfg.grpo_steps}" + (f"_w{step}" if recipe == "loop" else "") \
                + tags
            doc["lrs"].append(gold_grpo(cfg, out, name, ckpts[step], float(lr), len(train), len(dev), dev_true,
                                        before, clusters, grpo_seed(cfg, own)) | {"warm": step})
    chosen = max(doc["lrs"], key=lambda e: e["ci"][0])
    doc["chosen"] = {"sft_steps": chosen["warm"], "lr": chosen["lr"]}
    doc["seconds"] = round(time.monotonic() - t_start)
    stem = (f"control{'_loop' if recipe == 'loop' else ''}_b{cfg.grpo_batch}_s{cfg.grpo_steps}"  # one per budget
            + tags + ("" if own["warm"] == "best" else f"_w{own['warm'].replace(',', '-')}"))
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    _plot(doc, out / f"{stem}.png", figure, save_figure)
    print(f"wrote {out / stem}.json, {out / stem}.png; {doc['seconds']}s")
    last_line(line_values(doc), formats=LINE_FORMATS)


def reliable(truth: list[int], k: int) -> int:
    """Problems solved reliably: groups of ``k`` samples (one problem's) with at least half of them true. Gold GRPO
    raised the dev true rate from checkpoints with such problems and not from one whose truth was all 1-2 of 8
    (reports/loop_2026-12-07_gold_grpo_seeds.md)."""
    return sum(2 * sum(truth[i:i + k]) >= k for i in range(0, len(truth), k))


RELIABLE_MIN = 0.03  # reports/loop_2026-12-07_reliable_start.md: no checkpoint under it learned (5 of 5)


def reliable_start(sft: list[dict[str, Any]]) -> int | None:
    """``warm=reliable``: among the checkpoints with at least ``RELIABLE_MIN`` of the GRPO problems solved reliably
    (before GRPO), the one with the most mixed dev groups (ties: the earlier); None when no checkpoint has them
    (proposed in reports/loop_2026-12-07_reliable_start.md, tested on new seeds in its extension)."""
    ok = [e for e in sft if e["train_reliable"] >= RELIABLE_MIN * e["train_groups"]]
    return max(ok, key=lambda e: (e["mixed_groups"], -e["step"]))["step"] if ok else None


def warm_starts(warm: str, best: int, reliable_step: int | None) -> list[int]:
    """The SFT steps of ``warm`` (comma-separated steps, ``best``, ``reliable``) in order, each once; ``reliable``
    with no qualifying checkpoint is left out, and an error when nothing else is named."""
    named = {"best": best, "reliable": reliable_step}
    steps = [named[w] if w in named else int(w) for w in warm.split(",")]
    if all(s is None for s in steps):
        raise InputError(f"warm=reliable: no checkpoint solves at least {RELIABLE_MIN:.0%} of the GRPO problems "
                         "reliably, so no warm start (train the SFT longer)")
    return list(dict.fromkeys(s for s in steps if s is not None))


def grpo_seed(cfg: ProverHackingConfig, own: dict[str, str]) -> int:
    """GRPO's seed: ``grpo_seed`` when given, else the prover seed (the dev samples always use the prover seed, so
    runs of other GRPO seeds are paired with the same ``before``)."""
    return cfg.seed if own["grpo_seed"] == "None" else int(own["grpo_seed"])


def seed_tag(own: dict[str, str]) -> str:
    """``_g<seed>`` in the names of a run and of the summary when ``grpo_seed`` is given (the default's names are
    the earlier runs')."""
    return "" if own["grpo_seed"] == "None" else f"_g{own['grpo_seed']}"


def grpo_config(cfg: ProverHackingConfig, out: Path, name: str, warm: Path, lr: float, n_train: int, n_dev: int,
                seed: int) -> Any:
    """The gold-reward GRPO run from ``warm`` at ``lr`` with GRPO seed ``seed`` (``training.grpo.run``'s config)."""
    from training.config import DataConfig, EvalConfig, GRPORunConfig, GRPOSettings, ModelConfig, WandbSettings
    from training.prover_reward import ProverRLConfig

    return GRPORunConfig(
        experiment_name=name, output_dir=str(out / name), train=True, init_from=str(warm),
        model=ModelConfig(name_or_path=str(warm)),
        data=DataConfig(source="synthetic", n_train=n_train, n_eval=n_dev, seed=cfg.seed),
        grpo=GRPOSettings(max_steps=cfg.grpo_steps, per_device_train_batch_size=cfg.grpo_batch,
                          num_generations=cfg.num_generations, max_completion_length=cfg.max_completion_length,
                          learning_rate=lr, temperature=cfg.temperature, save_steps=10_000, beta=0.0,
                          gradient_accumulation_steps=1, warmup_steps=0, bf16=False, logging_steps=1,
                          seed=seed, log_completions=False),
        eval=EvalConfig(enabled=False), wandb=WandbSettings(enabled=False),
        prover=ProverRLConfig(enabled=True, reward="gold", problems=str(out / "train_problems.jsonl"),
                              eval_problems=str(out / "dev_problems.jsonl")))


def gold_grpo(cfg: ProverHackingConfig, out: Path, name: str, warm: Path, lr: float, n_train: int, n_dev: int,
              dev_true: Any, before: list[int], clusters: list[str], seed: int) -> dict[str, Any]:
    """Gold-reward GRPO from ``warm`` at ``lr`` with GRPO seed ``seed`` (skipped when its final weights are there);
    the dev true rate after against ``before`` (paired, clustered by problem) and the training batches' true rate,
    first vs last quarter."""
    from eval.stats import BootstrapSpec, mean_delta_ci
    from training.grpo import run

    rc = grpo_config(cfg, out, name, warm, lr, n_train, n_dev, seed)
    if not (out / name / "final" / "config.json").is_file():
        t0 = time.monotonic()
        run(rc)
        print(f"[control] GRPO {name}: {time.monotonic() - t0:.0f}s", flush=True)
    after = dev_true(out / name / "final")
    d, lo, hi = mean_delta_ci(after, before, clusters, BootstrapSpec(n=2000, seed=cfg.seed))
    logs = [e for e in json.loads((out / name / "train_log.json").read_text()) if e.get("prover/true_rate") is not None]
    q = max(1, len(logs) // 4)
    curve = [e["prover/true_rate"] for e in logs]
    e = {"lr": lr, "dev_true_before": sum(before) / len(before), "dev_true_after": sum(after) / len(after),
         "dev_gain": d, "ci": [lo, hi], "train_true_first": sum(curve[:q]) / q, "train_true_last": sum(curve[-q:]) / q,
         "curve": curve, "grpo_seed": seed}
    print(f"[control] GRPO {name}: dev true {100 * e['dev_true_before']:.1f}% -> {100 * e['dev_true_after']:.1f}% "
          f"({100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]); training batches {100 * e['train_true_first']:.1f}% "
          f"-> {100 * e['train_true_last']:.1f}%", flush=True)
    return e


def line_values(doc: dict[str, Any]) -> dict[str, Any]:
    """The chosen warm start (SFT steps) and learning rate, and that run's dev true rate before and after."""
    c = next(e for e in doc["lrs"] if e["lr"] == doc["chosen"]["lr"]
             and e.get("warm", doc["chosen"]["sft_steps"]) == doc["chosen"]["sft_steps"])
    before = next(e for e in doc["sft"] if e["step"] == doc["chosen"]["sft_steps"])["dev_true"]
    return {"control_sft_steps": doc["chosen"]["sft_steps"], "control_lr": c["lr"], "dev_true_before": before,
            "dev_true_after": c["dev_true_after"], "dev_gain": c["dev_gain"], "dev_gain_ci_low": c["ci"][0],
            "seconds": doc["seconds"]}


def _plot(doc: dict[str, Any], path: Path, figure: Any, save_figure: Any) -> None:
    fig, _axes = figure((10.0, 3.4))
    fig.clf()
    a1, a2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    a1.plot([e["step"] for e in doc["sft"]], [100 * e["dev_true"] for e in doc["sft"]], "o-", label="dev true %")
    a1.plot([e["step"] for e in doc["sft"]], [100 * e["mixed_groups"] / e["groups"] for e in doc["sft"]], "s--",
            label="groups with a gradient %")
    a1.set_xlabel("prover SFT step")
    a1.legend(fontsize=7)
    for i, e in enumerate(doc["lrs"]):
        a2.plot(range(1, len(e["curve"]) + 1), [100 * v for v in e["curve"]], color=f"C{i}", alpha=0.8,
                label=f"SFT {e.get('warm', doc['warm_start'])}, lr {e['lr']:g}: dev {100 * e['dev_gain']:+.1f} pts")
    a2.set_xlabel("gold-reward GRPO step")
    a2.set_ylabel("true % of the step's completions")
    a2.legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    run_command("diagnose-control", main)
