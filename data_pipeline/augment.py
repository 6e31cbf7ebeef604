"""Positive-sample augmentation by proof repair (section 4.2).

``python -m data_pipeline.augment input=PATH out=DIR generator.base_url=URL generator.model=M
'verifiers=[{base_url: URL, model: V}]' [verify.n=8] [attempts=1]``

For each invalid annotated trajectory with expert correction suggestions, the generator
(a configured model, or with ``own_model=true`` the proof's own ``generator`` mapped through
``model_map`` to a served model) is prompted with ``verifier.templates.repair_prompt``; the
answer is split into steps with ``verifier.generation.proof_steps_of`` (a thinking repairer's reasoning removed); each repair is verified (``check=verifiers``, the
default) by every verifier endpoint with ``verify.n`` passes under the pessimistic policy (the one runner
``verifier.runner.judge`` with the one judge config ``verify``, ``verifier.aggregate``): accepted only if every verifier accepts in every pass;
``check=exact`` takes the synthetic task's exact checker as the strong model instead. Accepted
repairs become positive samples (``positives.jsonl``: same problem id, annotation with no
fatal error, provenance in ``meta.augmentation``: parent id, repair model, verifier votes);
rejected repairs and their reasons go to ``rejected.jsonl``; trajectories that are not
candidates are counted in ``augment_summary.json``.

Repairs are written by THE generation runner (``verifier.generation.generate``): a task per (parent,
attempt), id ``repair:<parent>:<attempt>``, its ``outcome`` hook verifying each chunk's repairs before the
pure decisions ``repair_fate`` (a generated repair) and ``verification_fate`` (the verifiers' votes) send
it to ``positives.jsonl`` or ``rejected.jsonl``.

Resumable: work runs in chunks of ``batch_size`` trajectories; each result is appended and
fsynced (``JsonlAppender``) and a restarted run skips every (parent, attempt) already in
either file, so a crash loses at most the chunk in flight. Seeds are per (parent, attempt).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_pipeline.synthetic_check import check_proof
from verifier.config import EndpointConfig, hydra_main
from verifier.engine import Completion, OpenAIEngine
from verifier.errors import InputError
from verifier.formats import load_any
from verifier.generation import GenerationConfig, GenTask, Outcome, generate, outcome_counts, proof_steps_of
from verifier.identity import repair_id
from verifier.judging import JudgeConfig
from verifier.judgment import Judgment
from verifier.outputs import holds_output
from verifier.records import NO_STEP, Annotation, ProofTrajectory
from verifier.runner import judge
from verifier.templates import repair_prompt


@dataclass
class AugmentConfig:
    """Options of ``python -m data_pipeline.augment`` (mirrored by ``configs/augment.yaml``)."""

    input: str | None = None  # annotated trajectories (ingested folder, parquet or JSONL)
    out: str | None = None
    generator: EndpointConfig = field(default_factory=EndpointConfig)
    repair_model: str | None = None  # model name on the generator endpoint; null = generator.model
    own_model: bool = False  # repair with the proof's own generator (trajectory.generator via model_map)
    model_map: dict[str, str] = field(default_factory=dict)  # trajectory.generator -> served model name
    attempts: int = 1  # repairs per trajectory
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 2048
    min_steps: int = 1  # a repair with fewer steps is rejected
    reasoning_format: str = "think"  # a thinking repairer's reasoning removed first (think | think_opened | none)
    verifiers: list[EndpointConfig] = field(default_factory=lambda: [EndpointConfig()])
    # the strong check a repair must pass: ``verifiers`` (every verifier endpoint, every pass) or ``exact`` (the
    # exact checker of the synthetic task, ``data_pipeline.synthetic_check``, as the "strong model")
    check: str = "verifiers"
    # the one judge config (configs/judge/default.yaml); pessimistic, early stop at the first rejecting pass
    verify: JudgeConfig = field(default_factory=lambda: JudgeConfig(early_stop=True))
    batch_size: int = 32  # trajectories per persisted batch
    limit: int | None = None  # at most this many candidates (smoke runs)
    run_seed: int = 0
    progress: bool = True


def candidates(trajs: Sequence[ProofTrajectory]) -> tuple[list[ProofTrajectory], Counter]:
    """Invalid trajectories with correction suggestions, and why the others are not candidates."""
    keep, why = [], Counter()
    for t in trajs:
        a = t.annotation
        if a is None:
            why["unannotated"] += 1
        elif a.report_error_case:
            why["report_error_case"] += 1
        elif a.is_valid:
            why["valid"] += 1
        elif not a.correction.strip():
            why["no_correction"] += 1
        else:
            keep.append(t)
    return keep, why


def repair_model_for(t: ProofTrajectory, cfg: AugmentConfig) -> str:
    if cfg.own_model:
        if not t.generator:
            raise InputError(f"record {t.id!r}, field 'generator': own_model=true needs the proof's generator")
        return cfg.model_map.get(t.generator, t.generator)
    return cfg.repair_model or cfg.generator.model


def repaired_trajectory(parent: ProofTrajectory, steps: list[str], model: str, attempt: int,
                        votes: list[dict[str, Any]]) -> ProofTrajectory:
    """An accepted repair as a positive sample with provenance."""
    n_checks = sum(v["n_passes"] for v in votes)
    return ProofTrajectory(
        id=repair_id(parent.id, attempt),
        problem_id=parent.problem_id,
        problem=parent.problem,
        proof_steps=tuple(steps),
        reference_solution=parent.reference_solution,
        subject=parent.subject,
        split=parent.split,
        source="repair" + (f"/{parent.source}" if parent.source else ""),
        generator=model,
        annotation=Annotation(
            reviewer_comment=(f"Repaired proof of {parent.id} accepted by {len(votes)} verifier(s) in all "
                              f"{n_checks} pessimistic passes (section 4.2)."),
            first_fatal_error_step=NO_STEP,
        ),
        meta={"augmentation": {"parent_id": parent.id, "repair_model": model, "attempt": attempt,
                               "verifier_votes": votes}},
    )


def repair_key(parent_id: str, attempt: int) -> str:
    """The generation task id of a repair attempt (its seed is drawn from it).

    >>> repair_key("t1", 0)
    'repair:t1:0'
    """
    return f"repair:{parent_id}:{attempt}"


def _done_key(row: dict[str, Any]) -> str:
    """The (parent, attempt) a row of positives.jsonl (``meta.augmentation``) or rejected.jsonl holds."""
    aug = (row.get("meta") or {}).get("augmentation") or row
    return repair_key(str(aug["parent_id"]), int(aug["attempt"]))


def repair_fate(c: Completion, steps: Sequence[str] | None, min_steps: int) -> str:
    """What a generated repair becomes: ``verify``, ``retry`` (a failed request: not written, the next run
    retries it), or the reason it is rejected unverified (``prompt_too_long``, ``unparseable_repair``,
    ``unfinished_thinking``: steps None, a thinking repairer's reasoning never ended).

    >>> repair_fate(Completion("Step 0: a"), ["a"], 1), repair_fate(Completion(status="request_failed"), [], 1)
    ('verify', 'retry')
    >>> repair_fate(Completion(status="too_long"), [], 1), repair_fate(Completion("a"), ["a"], 2)
    ('prompt_too_long', 'unparseable_repair')
    """
    if c.status == "too_long":
        return "prompt_too_long"
    if c.status != "ok":
        return "retry"
    if steps is None:
        return "unfinished_thinking"
    if len(steps) < min_steps or not any(s.strip() for s in steps):
        return "unparseable_repair"
    return "verify"


def verification_fate(votes: Sequence[dict[str, Any]]) -> str:
    """A verified repair: ``accepted`` (every verifier accepted in every pass: a positive), ``retry`` (a
    verifier's requests failed: retried next run) or ``verifier_rejected``.

    >>> verification_fate([{"status": "ok", "accepted": True}, {"status": "ok", "accepted": False}])
    'verifier_rejected'
    >>> verification_fate([{"status": "request_failed", "accepted": False}])
    'retry'
    """
    if any(v["status"] == "request_failed" for v in votes):
        return "retry"
    return "accepted" if all(v["accepted"] for v in votes) else "verifier_rejected"


def vote(verifier: str, j: Judgment) -> dict[str, Any]:
    """One verifier's decision on one repair (the row the runner returns for it)."""
    a = j.aggregate
    return {"id": j.id, "verifier": verifier, "status": j.status, "verdict": a.verdict.value, "accepted": a.accepts,
            "n_passes": a.n_passes, "n_accept": a.n_accept, "n_reject": a.n_reject, "n_unparseable": a.n_unparseable,
            "first_error_step": a.first_error_step,
            "pass_verdicts": [p.verdict.value if p.verdict else p.status.value for p in j.passes]}


def exact_vote(r: ProofTrajectory) -> dict[str, Any]:
    """The exact checker's decision on a repair of a synthetic problem (``check=exact``), shaped as a vote.

    >>> t = ProofTrajectory("t-repair0", "p", "Compute 5 + 3.", ("5 + 3 = 8", "So the answer is 8."))
    >>> v = exact_vote(t); v["accepted"], v["verifier"]
    (True, 'exact-checker')
    """
    c = check_proof(r.problem, r.proof_steps)
    verdict = "valid" if c.true else "invalid"
    return {"id": r.id, "verifier": "exact-checker", "status": "ok", "verdict": verdict, "accepted": c.true,
            "n_passes": 1, "n_accept": int(c.true), "n_reject": int(not c.true), "n_unparseable": 0,
            "first_error_step": c.step, "pass_verdicts": [verdict], "reason": c.reason}


def _verify(repairs: list[ProofTrajectory], cfg: AugmentConfig) -> list[list[dict[str, Any]]]:
    """Votes of every verifier on every repair: the one runner once per verifier (seeds differ by verifier), or
    with ``check=exact`` the exact checker's.

    A repair whose requests failed gets a ``request_failed`` vote (not a decision: retried next run).
    """
    votes: list[list[dict[str, Any]]] = [[] for _ in repairs]
    if not repairs:
        return votes
    if cfg.check == "exact":
        return [[exact_vote(r)] for r in repairs]
    for k, ep in enumerate(cfg.verifiers):
        jc = dataclasses.replace(cfg.verify, run_seed=cfg.verify.run_seed + 1000 * k)
        res = judge(repairs, OpenAIEngine(ep), jc, None, to_row=lambda j, m=ep.model: vote(m, j))
        for i, (r, j) in enumerate(zip(repairs, res.judgments)):
            votes[i].append(res.rows[r.id] if r.id in res.rows else vote(ep.model, j))
    return votes


def _outcomes(pairs: list[tuple[GenTask, Completion]], cfg: AugmentConfig) -> list[Outcome]:
    """A chunk of repairs: those ``repair_fate`` sends on are verified, then ``verification_fate`` decides."""
    out: list[Outcome | None] = [None] * len(pairs)
    pending: list[tuple[int, ProofTrajectory, int, str, list[str], str]] = []
    for i, (task, c) in enumerate(pairs):
        t, a, m = task.problem, task.sample, task.model
        base = {"parent_id": t.id, "attempt": a, "repair_model": m, "text": c.text}
        steps = proof_steps_of(c.text, cfg.reasoning_format, c.reasoning) if c.text.strip() else []
        fate = repair_fate(c, steps, cfg.min_steps)
        if fate == "retry":
            out[i] = Outcome(counts={f"generation_{c.status}": 1})
        elif fate == "prompt_too_long":
            out[i] = Outcome({**base, "reason": fate, "detail": c.error}, rejected=True,
                             counts={"generation_too_long": 1})
        elif fate in ("unparseable_repair", "unfinished_thinking"):
            out[i] = Outcome({**base, "reason": fate, "detail": f"{len(steps or [])} steps"}, rejected=True,
                             counts={"rejected": 1})
        else:
            pending.append((i, t, a, m, steps, c.text))
    votes = _verify([repaired_trajectory(t, steps, m, a, []) for _, t, a, m, steps, _ in pending], cfg)
    for (i, t, a, m, steps, text), vs in zip(pending, votes):
        fate = verification_fate(vs)
        if fate == "retry":
            out[i] = Outcome(counts={"verification_request_failed": 1})
        elif fate == "accepted":
            out[i] = Outcome(repaired_trajectory(t, steps, m, a, vs).to_dict(), counts={"accepted": 1})
        else:
            out[i] = Outcome({"parent_id": t.id, "attempt": a, "repair_model": m, "text": text, "proof_steps": steps,
                              "reason": fate, "verifier_votes": vs}, rejected=True, counts={"rejected": 1})
    return out  # type: ignore[return-value]


@holds_output()
def run(cfg: AugmentConfig) -> dict[str, Any]:
    """Repair, verify, and append accepted/rejected repairs; returns the summary (also written)."""
    if not cfg.input or not cfg.out:
        raise InputError("augment config: input=PATH and out=DIR are required")
    if cfg.check not in ("verifiers", "exact"):
        raise InputError(f"augment config, field 'check': use verifiers or exact, got {cfg.check!r}")
    if cfg.check == "verifiers" and not cfg.verifiers:
        raise InputError("augment config, field 'verifiers': at least one verifier endpoint is required")
    if cfg.attempts < 1 or cfg.batch_size < 1 or cfg.verify.n < 1:
        raise InputError("augment config: attempts, batch_size and verify.n must be >= 1")
    if cfg.verify.policy != "pessimistic":
        raise InputError(f"augment config, field 'verify.policy': section 4.2 keeps a repair only if every pass "
                         f"accepts (pessimistic), got {cfg.verify.policy!r}")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    trajs = load_any(cfg.input).records
    cands, not_cand = candidates(trajs)
    if cfg.limit is not None:
        cands = cands[: cfg.limit]
    pos_path, rej_path = out / "positives.jsonl", out / "rejected.jsonl"
    tasks = [GenTask(t, a, key=repair_key(t.id, a), model=repair_model_for(t, cfg))
             for t in cands for a in range(cfg.attempts)]
    gen_cfg = GenerationConfig(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                               run_seed=cfg.run_seed, chunk_size=cfg.batch_size)
    s = generate(tasks, OpenAIEngine(cfg.generator), gen_cfg, pos_path, rejects=rej_path, done_key=_done_key,
                 prompt=lambda task: repair_prompt(task.problem), outcome=lambda pairs: _outcomes(pairs, cfg),
                 progress=cfg.progress, desc="repair+verify", budget_key="max_tokens")
    summary = {
        "input": cfg.input, "trajectories": len(trajs), "candidates": len(cands), "attempts": cfg.attempts,
        "not_candidates": dict(not_cand), "resumed_done": s["already_done"], "this_run": outcome_counts(s),
        "positives_total": _count(pos_path), "rejected_total": _count(rej_path),
        "check": cfg.check, "verifiers": [v.model for v in cfg.verifiers] if cfg.check == "verifiers" else
        ["exact-checker"], "passes_per_verifier": cfg.verify.n if cfg.check == "verifiers" else 1,
    }
    (out / "augment_summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def _count(path: Path) -> int:
    return sum(1 for line in open(path, encoding="utf-8") if line.strip()) if path.exists() else 0


def main() -> None:
    """Hydra app: ``python -m data_pipeline.augment input=PATH out=DIR``."""
    @hydra_main("augment", AugmentConfig)
    def _run(cfg: AugmentConfig) -> None:
        s = run(cfg)
        print(f"augment: {s['candidates']} candidates x {s['attempts']} attempts; this run {s['this_run']}; "
              f"resumed {s['resumed_done']}; positives={s['positives_total']} rejected={s['rejected_total']} "
              f"in {cfg.out}")

    _run()


if __name__ == "__main__":
    main()
