"""`make diagnose-prover`: how `make bench-prover`'s budgets were chosen (docs/prover.md, issue 25 item 3).

Three measurements on training problems only (the bench's GRPO problems, which occur neither in the prover's
SFT set nor in the held-out set), with ``bench/bench_prover.py``'s task knobs and problem seeds:

1. the prover's true accuracy (exact checker, greedy) after each ``every`` SFT steps on gold proofs;
2. at the end of that SFT, the true rate of sampled proofs at several temperatures and the number of GRPO
   groups (``num_generations`` samples of one problem) whose gold reward is mixed, i.e. gives a gradient;
3. the verifier SFT (the bench's recipe): per-pass parse status and verdict on gold proofs and on proofs with
   one wrong operation result (``5 + 3 = 9``, an error kind it is never shown), at two judge temperatures.

Generation is Hugging Face ``generate`` on the tiny models (no server). Writes
``runs/diagnose_prover/{diagnosis.json,diagnosis.png}``; last line ``prover_true_acc=<r> mixed_groups_best=<n>
verifier_parsed=<r> verifier_accepts_wrong=<r> seconds=<n>``. Options as ``key=value``: every ``bench.common.ProverHackingConfig`` field
of the bench (``prover_sft_steps``, ``verifier_sft_steps``, ...) plus ``every`` and ``n_problems``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import ProverHackingConfig, environment, last_line, prover_options, run_command, split_options

environment(wandb=True)  # bench-prover's environment (this script imported it from there)

TEMPERATURES = (0.0, 0.5, 0.7, 1.0)
JUDGE_TEMPERATURES = (0.5, 1.0)


def _checkpoints(run_dir: Path, max_steps: int) -> list[Path]:
    """Every saved checkpoint, then ``final`` (the last checkpoint is ``final``: not measured twice)."""
    cks = sorted(run_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return [*(c for c in cks if int(c.name.split("-")[1]) < max_steps), run_dir / "final"]


def _wrong_result(steps: list[str], rng: random.Random) -> list[str]:
    """One operation step with a wrong result (``5 + 3 = 9``): the verifier's blind spot in the bench."""
    s = list(steps)
    i = rng.randrange(len(s) - 1)
    lhs, res = s[i].rsplit("= ", 1)
    s[i] = f"{lhs}= {int(res) + rng.choice([-2, -1, 1, 2, 3])}"
    return s


@dataclasses.dataclass
class ProverOptions:
    """The diagnosis's own options, beside bench-prover's (``ProverHackingConfig``): the checkpoint spacing and the
    number of dev problems."""
    every: int = 100
    n_problems: int = 64


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    own, rest = split_options(argv, ProverOptions())
    cfg = prover_options(rest, ProverHackingConfig(out="runs/diagnose_prover"))
    every, n_problems = own.every, own.n_problems
    from datasets import Dataset

    from data_pipeline.synthetic_check import check_proof, gold_proof, proof_text
    from training.config import DataConfig, ModelConfig
    from training.data import load_trajectories_for
    from training.diagnostics import hf_samples
    from training.prover_reward import problem_rows, synthetic_problems
    from training.sft import SFTRunConfig, sft_train
    from verifier.results import WandbConfig  # bench runs log no W&B (SFT's default: on)
    from verifier.parser import parse_completion
    from verifier.records import ProofTrajectory
    from verifier.results import figure, save_figure
    from verifier.templates import as_messages, split_proof_steps, verification_prompt
    from verifier.tiny_model import TinyModelConfig, build

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    task = {"min_steps": cfg.min_steps, "max_steps": cfg.max_steps, "max_operand": cfg.max_operand,
            "recoverable_rate": 0.0, "qe_fraction": 0.0, "subjects": cfg.subjects.split(",")}
    model_dir = build(TinyModelConfig(out=str(out / "model"), seed=cfg.seed, hidden_size=cfg.hidden_size,
                                      num_layers=cfg.num_layers, intermediate_size=cfg.intermediate_size))
    sft_problems = synthetic_problems(cfg.n_prover_sft, cfg.seed + 1, **task)  # the bench's seeds
    seen = {p.problem for p in sft_problems}
    probe = [p for p in synthetic_problems(cfg.n_grpo, cfg.seed + 2, **task) if p.problem not in seen][:n_problems]
    doc: dict[str, Any] = {"config": dataclasses.asdict(cfg), "every": every, "problems": len(probe),
                           "on": "the bench's GRPO problems (not in the prover's SFT set, not held-out)"}

    # 1. prover SFT budget -> true accuracy (greedy)
    rows = problem_rows(sft_problems)
    for r, p in zip(rows, sft_problems):
        r["completion"] = [{"role": "assistant", "content": proof_text(gold_proof(p.problem))}]
    ds = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])
    sft_train(SFTRunConfig(wandb=WandbConfig(enabled=False),
        output_dir=str(out / "prover_sft"), model=ModelConfig(name_or_path=str(model_dir)),
        max_steps=cfg.prover_sft_steps, per_device_train_batch_size=cfg.sft_batch, learning_rate=cfg.prover_sft_lr,
        warmup_steps=5, max_length=512, logging_steps=50, seed=cfg.seed, gradient_accumulation_steps=1, bf16=False,
        save_steps=every, save_total_limit=None), [], dataset=ds)
    prompts = [r["prompt"] for r in problem_rows(probe)]

    def true_of(texts: list[tuple[str, str]], problems: list[Any]) -> list[bool]:
        return [check_proof(p.problem, split_proof_steps(t)).true for p, (t, _f) in zip(problems, texts)]

    curve = []
    for ck in _checkpoints(out / "prover_sft", cfg.prover_sft_steps):
        t = true_of(hf_samples(ck, prompts, 0.0, cfg.max_completion_length), probe)
        step = cfg.prover_sft_steps if ck.name == "final" else int(ck.name.split("-")[1])
        curve.append({"step": step, "true_acc": sum(t) / len(t)})
        print(f"[diagnose] prover SFT step {step}: true {100 * curve[-1]['true_acc']:.1f}%", flush=True)
    doc["prover_sft"] = curve

    # 2. sampling temperature -> true rate and groups with a gradient (GRPO's num_generations per problem)
    k = cfg.num_generations
    rep = [p for p in probe for _ in range(k)]
    temps = []
    for temp in TEMPERATURES:
        t = true_of(hf_samples(out / "prover_sft" / "final", [pr for pr in prompts for _ in range(k)], temp,
                              cfg.max_completion_length), rep)
        groups = [t[i:i + k] for i in range(0, len(t), k)]
        temps.append({"temperature": temp, "true_rate": sum(t) / len(t),
                      "mixed_groups": sum(0 < sum(g) < k for g in groups), "groups": len(groups)})
        print(f"[diagnose] prover temperature {temp}: true {100 * temps[-1]['true_rate']:.1f}%, groups with a "
              f"gradient {temps[-1]['mixed_groups']}/{len(groups)}", flush=True)
    doc["prover_temperature"] = temps

    # 3. verifier SFT budget and judge temperature -> parse rate and acceptance
    vdata = DataConfig(source="synthetic", n_train=cfg.n_verifier_sft, n_eval=0, seed=cfg.seed + 4,
                       prompt_template=cfg.verifier_template,
                       synthetic={**task, "fatal_kinds": ["wrong_operand", "wrong_final"], "error_delta_min": 10,
                                  "error_delta_max": 20, "problem_id_from_text": True})
    vtrain, _ = load_trajectories_for(vdata)
    sft_train(SFTRunConfig(wandb=WandbConfig(enabled=False),
        output_dir=str(out / "verifier_sft"), model=ModelConfig(name_or_path=str(model_dir)), data=vdata,
        style="check", max_steps=cfg.verifier_sft_steps, per_device_train_batch_size=cfg.sft_batch,
        learning_rate=cfg.verifier_sft_lr, warmup_steps=5, max_length=512, logging_steps=50, seed=cfg.seed,
        gradient_accumulation_steps=1, bf16=False, save_steps=every, save_total_limit=None), vtrain)
    rng = random.Random(cfg.seed)
    proofs = {"gold": [gold_proof(p.problem) for p in probe],
              "wrong_result": [_wrong_result(gold_proof(p.problem), rng) for p in probe]}
    passes = 4
    vcurve = []
    for ck in _checkpoints(out / "verifier_sft", cfg.verifier_sft_steps):
        step = cfg.verifier_sft_steps if ck.name == "final" else int(ck.name.split("-")[1])
        for temp in JUDGE_TEMPERATURES:
            entry: dict[str, Any] = {"step": step, "temperature": temp}
            for kind, steps in proofs.items():
                trajs = [ProofTrajectory(f"d{i}", p.id, p.problem, tuple(s)) for i, (p, s) in enumerate(zip(probe, steps))]
                vp = [as_messages(verification_prompt(t, False, cfg.verifier_template)) for t in trajs for _ in range(passes)]
                outs = [parse_completion(t, f) for t, f in hf_samples(ck, vp, temp, cfg.verifier_max_tokens)]
                c = collections.Counter(o.verdict.value if o.ok else o.status.value for o in outs)
                entry[kind] = {"parsed": sum(o.ok for o in outs) / len(outs),
                               "valid": c.get("valid", 0) / len(outs), "status": dict(c)}
            vcurve.append(entry)
            print(f"[diagnose] verifier SFT step {step}, temperature {temp}: parsed "
                  f"{100 * entry['gold']['parsed']:.0f}% / accepts gold {100 * entry['gold']['valid']:.0f}%, "
                  f"accepts a wrong result {100 * entry['wrong_result']['valid']:.0f}%", flush=True)
    doc["verifier_sft"] = vcurve
    doc["seconds"] = round(time.monotonic() - t_start)
    (out / "diagnosis.json").write_text(json.dumps(doc, indent=1))

    fig, _axes = figure((12.0, 3.4))
    fig.clf()
    a1, a2, a3 = (fig.add_subplot(1, 3, i) for i in (1, 2, 3))
    a1.plot([e["step"] for e in curve], [100 * e["true_acc"] for e in curve], "o-")
    a1.set_xlabel("prover SFT step")
    a1.set_ylabel("true % (greedy)")
    a2.bar([str(e["temperature"]) for e in temps], [e["mixed_groups"] for e in temps])
    a2.set_xlabel("prover sampling temperature")
    a2.set_ylabel(f"groups of {k} with a mixed gold reward")
    for j, temp in enumerate(JUDGE_TEMPERATURES):
        es = [e for e in vcurve if e["temperature"] == temp]
        a3.plot([e["step"] for e in es], [100 * e["gold"]["parsed"] for e in es], "-", color=f"C{j}",
                label=f"parsed, T={temp}")
        a3.plot([e["step"] for e in es], [100 * e["gold"]["valid"] for e in es], ":", color=f"C{j}",
                label=f"accepts gold, T={temp}")
    a3.set_xlabel("verifier SFT step")
    a3.set_ylabel("% of passes")
    a3.legend(fontsize=6)
    save_figure(fig, out / "diagnosis.png")
    print(f"wrote {out / 'diagnosis.json'}, {out / 'diagnosis.png'}; {doc['seconds']}s")
    last_line(line_values(doc), formats=LINE_FORMATS)


LINE_FORMATS = {"mixed_groups_best": "d", "seconds": "d"}


def line_values(doc: dict[str, Any]) -> dict[str, Any]:
    """The diagnosis's last line: the prover's greedy true accuracy at the end of its SFT, the most GRPO groups with
    a mixed gold reward over the sampling temperatures, and the verifier at its last SFT step and judge temperature
    (share of parsed passes on gold proofs, share accepting a proof with a wrong result)."""
    v = doc["verifier_sft"][-1]
    return {"prover_true_acc": doc["prover_sft"][-1]["true_acc"],
            "mixed_groups_best": max(e["mixed_groups"] for e in doc["prover_temperature"]),
            "verifier_parsed": v["gold"]["parsed"], "verifier_accepts_wrong": v["wrong_result"]["valid"],
            "seconds": doc["seconds"]}


if __name__ == "__main__":
    run_command("diagnose-prover", main)
