"""Named data recipes of the synthetic task for proofs a prover wrote (``make bench-ladder``, section 4.1, 5.4).

* ``prover_sft_rows``: a tiny prover's SFT data: the B.1 prompt, the revision prompt (a critique of a flawed proof)
  and the repair prompt (an expert's review, section 4.2), each answered with the gold proof;
* ``error_mix``: candidate proofs per generator (model at temperature): true rate and the first error's kind;
* ``label_held_out``: held-out prover proofs with the exact checker's appendix-C annotation (evaluation labels);
* ``pass_acceptance``: a verifier's per-pass acceptance of true and false proofs (by error kind) and parse rate;
* ``grpo_step_batch``: one verifier GRPO step of parseable completions, to time a reward on;
* ``PLANTED_ERRORS``: the demo's planted errors (a wrong operand or final answer, 10-20 off), the verifier's warm start;
* ``random_queue``: the uncertainty queue's baseline (section 4.1), the same budget and per-problem cap at random;
* ``simulated_expert_annotation``: a queue annotated the user's way, by the simulated expert (appendix C);
* ``grpo_variants``: the Table 3 GRPO data variants (base / extra_ann / pos_aug) over one held-out set;
* ``VerificationTask``, ``verification_task``, ``sft_data_mix``: the synthetic verification task of the benches that
  train a verifier on it (``make bench-learning``, ``make bench-real``) and its SFT data's own mix.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from pathlib import Path
from typing import Any

from data_pipeline.candidates import revision_prompt
from data_pipeline.simulated_expert import expert_annotation
from data_pipeline.synthetic import SyntheticConfig, _apply
from data_pipeline.synthetic_check import check_proof, gold_proof, parse_problem, proof_text
from verifier.generation import Condition
from verifier.judgment import load_judgments
from verifier.records import ProofTrajectory, Verdict
from verifier.templates import as_messages, generation_prompt, repair_prompt


def flawed_proof(problem: str, rng: random.Random) -> list[str]:
    """A proof of ``problem`` with one wrong operation result (1-3 off) carried on to the answer: the error a
    prover makes most (``wrong_result``).

    >>> flawed_proof("Compute 5 + 3 - 2.", random.Random(0))
    ['5 + 3 = 8', '8 - 2 = 4', 'So the answer is 4.']
    """
    _, cur, ops = parse_problem(problem)
    k = rng.randrange(len(ops))
    steps = []
    for i, (op, b) in enumerate(ops):
        nxt = _apply(cur, op, b)
        if i == k:
            nxt = nxt + rng.randint(1, 3) if nxt < 3 or rng.random() < 0.5 else nxt - rng.randint(1, 3)
        steps.append(f"{cur} {op} {b} = {nxt}")
        cur = nxt
    return [*steps, f"So the answer is {cur}."]


def prover_sft_rows(problems, seed: int, repair_fraction: float = 0.3) -> list[dict[str, Any]]:
    """The prover's SFT data (arithmetic chains): the B.1 prompt; for ``repair_fraction`` of the problems instead
    the revision prompt (a critique of a flawed proof of the same problem) or the repair prompt (the expert's review
    and correction, section 4.2); each answered with the gold proof.

    >>> from verifier.formats import ProofProblem
    >>> rows = prover_sft_rows([ProofProblem(f"p{i}", f"Compute {i} + 3 - 2.") for i in range(3, 9)], 1, 0.5)
    >>> sorted({r["prompt"][0]["content"].split()[0] for r in rows})
    ['Below', 'Prove']
    """
    rows, rng = [], random.Random(seed)
    for p in problems:
        gold = proof_text(gold_proof(p.problem))
        prompt = generation_prompt(p.problem)
        if rng.random() < repair_fraction:
            steps = tuple(flawed_proof(p.problem, rng))
            ann, _ = expert_annotation(p.problem, steps)
            if rng.random() < 0.5:
                prompt = revision_prompt(p.problem, Condition(p.id, steps, ann.reviewer_comment, "invalid",
                                                              ann.first_fatal_error_step))
            else:
                prompt = repair_prompt(ProofTrajectory(p.id, p.id, p.problem, steps, annotation=ann))
        rows.append({"prompt": as_messages(prompt), "completion": [{"role": "assistant", "content": gold}]})
    return rows


def error_mix(trajs) -> dict[str, Any]:
    """Per generator (model @ temperature): proofs, true rate, and the first error's kind (exact checker)."""
    out: dict[str, Any] = {}
    for t in trajs:
        c = (t.meta or {}).get("candidate") or {}
        g = out.setdefault(f"{Path(str(c.get('model'))).name}@T{c.get('temperature')}", {"n": 0, "true": 0,
                                                                                        "kinds": Counter()})
        chk = check_proof(t.problem, t.proof_steps)
        g["n"] += 1
        g["true"] += chk.true
        g["kinds"][chk.kind or "true"] += 1
    return {k: {"n": v["n"], "true_rate": v["true"] / v["n"], "kinds": dict(v["kinds"].most_common())}
            for k, v in sorted(out.items())}


def label_held_out(trajs) -> list[Any]:
    """Held-out prover proofs with the exact checker's appendix-C annotation (evaluation labels); a proof the
    expert would report as an abnormal case (no steps) is left out."""
    out = []
    for t in trajs:
        ann = expert_annotation(t.problem, t.proof_steps)[0]
        if not ann.report_error_case:
            out.append(dataclasses.replace(t, annotation=ann))
    return out


def pass_acceptance(trajs, judgments_path: Path) -> dict[str, Any]:
    """The diagnosis of the warm-start verifier on pool (training) proofs: per-pass acceptance of true and of false
    proofs (by the first error's kind) and the parse rate, from the selection's judgments."""
    by_id = {t.id: t for t in trajs}
    acc: dict[str, list[int]] = {}
    parsed = total = 0
    for j in load_judgments(judgments_path, passes_only=True):
        t = by_id[j.id]
        c = check_proof(t.problem, t.proof_steps)
        for key in ("true" if c.true else "false", f"false:{c.kind}" if not c.true else "true"):
            a = acc.setdefault(key, [0, 0])
            for pss in j.passes:
                a[0] += pss.ok and pss.verdict is Verdict.VALID
                a[1] += 1
        parsed += sum(pss.ok for pss in j.passes)
        total += len(j.passes)
    return {"parse_rate": parsed / total if total else float("nan"),
            **{f"accept_per_pass[{k}]": round(a / n, 4) for k, (a, n) in sorted(acc.items()) if n},
            **{f"passes[{k}]": n for k, (_, n) in sorted(acc.items())}}


def grpo_step_batch(batch: int, generations: int, seed: int = 0):
    """One verifier GRPO step to time a reward on: (completions, TRL reward kwargs) for ``batch // generations``
    synthetic prompts, each completion parseable with a random verdict and step (``make bench-reward``)."""
    from data_pipeline.grpo_dataset import build_grpo_dataset
    from data_pipeline.synthetic import generate_synthetic
    from verifier.parser import format_verification

    n_prompts = batch // generations
    trajs = generate_synthetic(n_prompts, seed=seed, min_steps=4, max_steps=5, recoverable_rate=0.3)
    ds = build_grpo_dataset(trajs, with_reference=False)
    rng = random.Random(seed)
    completions, cols = [], {c: [] for c in ds.column_names if c != "prompt"}
    for i, t in enumerate(trajs):
        for _ in range(generations):
            n = len(t.proof_steps)
            verdict = rng.choice(["valid", "invalid"])
            step = -1 if verdict == "valid" else rng.randrange(n)
            text = format_verification(verdict, step, f"Step {rng.randrange(n)} needs a closer look; "
                                                      f"the computation in step {max(step, 0)} is checked.")
            completions.append([{"role": "assistant", "content": text}])
            for c in cols:
                cols[c].append(ds[i][c])
    return completions, cols


# the demo's planted errors: a wrong operand or a wrong final answer, 10-20 off (what the verifier's warm start knows)
PLANTED_ERRORS: dict[str, Any] = {"fatal_kinds": ["wrong_operand", "wrong_final"], "error_delta_min": 10,
                                  "error_delta_max": 20}


def random_queue(pool: list[Any], budget: int, per_problem_cap: int, seed: int) -> list[Any]:
    """``budget`` proofs of ``pool`` drawn at random, at most ``per_problem_cap`` per problem: the baseline of
    verifier-uncertainty selection (section 4.1) with its budget and cap."""
    rng = random.Random(seed)
    queue: list[Any] = []
    taken: Counter = Counter()
    for t in rng.sample(pool, len(pool)):
        if len(queue) < budget and taken[t.problem_id] < per_problem_cap:
            queue.append(t)
            taken[t.problem_id] += 1
    return queue


def simulated_expert_annotation(d: Path, queue: Path, budget: int) -> dict[str, Any]:
    """``annotate export`` -> simulated expert (its Label Studio export) -> ``data_pipeline.ingest``: the queue
    annotated the user's way; what training reads is ``d/ingested``."""
    from data_pipeline.annotate import AnnotateConfig, export
    from data_pipeline.ingest import IngestConfig
    from data_pipeline.ingest import run as ingest
    from data_pipeline.simulated_expert import SimulatedExpertConfig
    from data_pipeline.simulated_expert import run as simulate

    export(AnnotateConfig(queue=str(queue), out=str(d / "tasks"), progress=False))
    s = simulate(SimulatedExpertConfig(tasks=str(d / "tasks" / "tasks.json"), out=str(d / "expert"), budget=budget))
    r = ingest(IngestConfig(input=str(d / "expert" / "export.json"), out=str(d / "ingested"), progress=False,
                            name="simulated expert annotations"))
    return {"expert": s, "ingested": r.summary()}


def grpo_variants(d: Path, held: list[Any], base: list[Any], annotated: dict[str, Path], positives: Path,
                  seed: int) -> dict[str, Any]:
    """Table 3's GRPO data (``data_pipeline.grpo_dataset``): ``base`` (planted-error records) in ``d/base.jsonl``;
    per root of ``annotated`` (``data``: every variant base / extra_ann / pos_aug; any other: extra_ann) the
    variants over the same ``held`` set, extra_ann adding that root's annotations, pos_aug also the repairs."""
    from data_pipeline.grpo_dataset import GrpoDataConfig, write_variant
    from verifier.io import write_jsonl

    write_jsonl(d / "base.jsonl", base)
    out = {}
    for root, extra in annotated.items():
        write_jsonl(d / root / "held_out.jsonl", held)
        for variant in ("base", "extra_ann", "pos_aug") if root == "data" else ("extra_ann",):
            out[f"{root}/{variant}"] = write_variant(GrpoDataConfig(
                variant=variant, base=str(d / "base.jsonl"), extra=str(extra), augmented=str(positives),
                held_out=str(d / root / "held_out.jsonl"), out=str(d / root / variant), seed=seed))
    return out


@dataclasses.dataclass
class VerificationTask:
    """The synthetic verification task's options (flat ``key=value`` bench options, inherited by the benches'
    configs): chains of ``min_steps``-``max_steps`` operations on operands up to ``max_operand``, planted errors of
    ``fatal_kinds`` whose wrong values are ``error_delta_min``-``error_delta_max`` off (the demo's obvious errors);
    the SFT data's own valid fraction and fatal kinds (``sft_data_mix``)."""

    min_steps: int = 3
    max_steps: int = 3
    max_operand: int = 9
    subjects: str = "arithmetic"
    fatal_kinds: str = "wrong_operand,wrong_final"
    error_delta_min: int = 10
    error_delta_max: int = 20
    # the SFT data's own mix (GRPO and held-out data keep the task's 50% valid, ``fatal_kinds``): more invalid proofs
    # with a wrong operand put more lines whose start differs from the previous result in the SFT targets, the
    # lines the start = previous-result shortcut gets wrong (bench-learning's item-4 diagnosis)
    sft_valid_fraction: float = 0.5
    sft_fatal_kinds: str = ""  # empty: ``fatal_kinds``


def verification_task(cfg: Any) -> dict[str, Any]:
    """The synthetic verification task's options (``data_pipeline.synthetic.SyntheticConfig``) of every data set of
    ``make bench-learning`` (``cfg``: its options)."""
    return {"min_steps": cfg.min_steps, "max_steps": cfg.max_steps, "max_operand": cfg.max_operand,
            "recoverable_rate": 0.0, "qe_fraction": 0.0, "fatal_kinds": cfg.fatal_kinds.split(","),
            "subjects": cfg.subjects.split(","), "problem_id_from_text": True,
            "error_delta_min": cfg.error_delta_min, "error_delta_max": cfg.error_delta_max}


def sft_data_mix(cfg: Any) -> dict[str, Any]:
    """The SFT data's own valid fraction and fatal kinds where they differ from the task's (GRPO and held-out data
    keep the task's): an empty dict by default, so that an SFT stage finished before these options resumes."""
    mix = {"valid_fraction": cfg.sft_valid_fraction, "fatal_kinds": (cfg.sft_fatal_kinds or cfg.fatal_kinds).split(",")}
    task = {"valid_fraction": SyntheticConfig.valid_fraction, **verification_task(cfg)}
    return {k: v for k, v in mix.items() if v != task[k]}
