"""Candidate proofs: k proofs per problem from each generator, improved by iterative revision (section 4.1).

``python -m data_pipeline.candidates problems=PATH out=DIR 'generators=[{base_url: URL, model: M1}, {base_url: URL, model: M2}]'
k=4 rounds=1 critic=self|verifier [verifier.base_url=URL verifier.model=V]``

For each problem (``problems.jsonl`` of ``data_pipeline.curate``, or any input of
``load_proofbench_problems``), each generator endpoint writes ``k`` proofs with the B.1 prompt
(``verifier.templates.generation_prompt``); each proof is split into steps
(``verifier.generation.proof_steps_of``: a thinking generator's reasoning removed, then ``Step k:``). With ``rounds=r`` each version is then revised r times (a simple
iterative revision, after Gao et al. 2025): a critic judges it — ``critic=self``: the generator
itself with ``verifier/prompts/critique_proof.j2``; ``critic=verifier``: ``verifier.n`` passes of a
verifier endpoint with the verification prompt — both through ``verifier.runner.judge_trajectories``,
and the same generator revises it from the critique (``revise_proof.j2``). With
``stop_when_accepted`` a version the critic accepts is not revised further.

Every version is kept as a ``ProofTrajectory`` without annotation in ``candidates.jsonl`` (the
``trajectories=`` input of ``data_pipeline.selection``), id ``<problem>-g<generator>-s<sample>-r<round>``
(``verifier.identity.version_id``),
with provenance in ``meta.candidate``: model, generator index, sample, round, parent id, the
critic and the critique (verdict, first error step, rationale) that led to the revision, and the
generation's finish reason (``length``: cut at ``max_tokens``, counted as ``truncated``).
Versions not produced are in ``skipped.jsonl`` with a reason (``empty_proof``,
``prompt_too_long``, ``accepted_by_critic``, ``critic_failed``) and counted in ``candidates_summary.json``.

Generation runs on THE generation runner (``verifier.generation.generate``), once per round and
generator: round 0's tasks are the (problem, sample) pairs, round r's the versions of round r-1; its
``condition`` hook critiques a chunk's parents just before the revisions are generated. The keep/skip
decisions are the pure functions ``version_fate`` (a generated version) and ``revision_fate`` (a critiqued one).

Resumable: results are appended and fsynced (``JsonlAppender``) chunk by chunk; a restarted run
skips every id already in ``candidates.jsonl`` or ``skipped.jsonl`` (a torn last line is dropped).
Failed requests are not written, so a re-run retries them. Seeds are per (id, run seed).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.config import EndpointConfig, Sampling, hydra_main
from verifier.engine import Completion, OpenAIEngine
from verifier.errors import InputError
from verifier.formats import ProofProblem, load_proofbench_problems
from verifier.identity import version_id
from verifier.generation import (
    Condition,
    GenerationConfig,
    GenTask,
    Outcome,
    generate,
    outcome_counts,
    proof_steps_of,
)
from verifier.io import load_trajectories, read_jsonl, truncate_partial_last_line
from verifier.judging import JudgeConfig
from verifier.outputs import holds_output
from verifier.records import NO_STEP, ProofTrajectory
from verifier.runner import judge_trajectories
from verifier.templates import generation_prompt, render


@dataclass
class CriticConfig(Sampling):
    """How a version is critiqued before revision (``verifier.judging.JudgeConfig`` fields; sampling:
    ``verifier.config.Sampling``)."""

    n: int = 1  # passes (critic=verifier: pessimistic over n; critic=self: usually 1)
    with_reference: bool = False  # show the problem's reference solution to the critic
    template: str | None = None  # prompt template (verifier/prompts); null: verify (critic=verifier), critique_proof
    # extra request body for critique requests only (e.g. vLLM structured outputs for the answer block);
    # null: the critic endpoint's own extra_body
    extra_body: Any = None


@dataclass
class CandidatesConfig:
    """Options of ``python -m data_pipeline.candidates`` (mirrored by ``configs/candidates.yaml``)."""

    problems: str | None = None  # curated problems.jsonl (or an IMO-ProofBench CSV / problems JSONL)
    out: str | None = None
    generators: list[EndpointConfig] = field(default_factory=lambda: [EndpointConfig()])
    k: int = 4  # proofs per problem and generator
    rounds: int = 0  # revision rounds per proof (0: no revision)
    critic: str = "self"  # self | verifier
    verifier: EndpointConfig = field(default_factory=EndpointConfig)  # critic=verifier only
    critique: CriticConfig = field(default_factory=CriticConfig)
    stop_when_accepted: bool = True  # do not revise a version the critic accepts
    # a thinking generator's reasoning, removed before the steps (verifier.generation.proof_steps_of):
    # think | think_opened | none
    reasoning_format: str = "think"
    temperature: float = 1.0
    # one sampling temperature per generator (several generators: a model at a few temperatures may be listed
    # twice); empty: ``temperature`` for every generator
    temperatures: list[float] = field(default_factory=list)
    top_p: float = 1.0
    max_tokens: int = 2048
    batch_size: int = 32  # versions per persisted batch
    limit: int | None = None  # at most this many problems (smoke runs)
    run_seed: int = 0
    progress: bool = True


def _trajectory(p: ProofProblem, g: int, model: str, sample: int, rnd: int, steps: list[str],
                parent: str | None, critique: dict[str, Any] | None, critic: str | None) -> ProofTrajectory:
    return ProofTrajectory(
        id=version_id(p.id, sample, rnd, generator=g), problem_id=p.id, problem=p.problem,
        proof_steps=tuple(steps),
        reference_solution=p.reference_solution, subject=p.subject, split=p.split, source=p.source or "candidates",
        generator=model,
        meta={"candidate": {"model": model, "generator_index": g, "sample": sample, "round": rnd,
                            "parent_id": parent, "critic": critic, "critique": critique}},
    )


def _critique(versions: list[ProofTrajectory], cfg: CandidatesConfig) -> list[dict[str, Any]]:
    """One critique per version (verdict, first error step, rationale, status) via ``judge_trajectories``."""
    out: list[dict[str, Any] | None] = [None] * len(versions)
    groups: dict[int, list[int]] = {}
    for i, v in enumerate(versions):
        groups.setdefault(-1 if cfg.critic == "verifier" else v.meta["candidate"]["generator_index"], []).append(i)
    for g, idx in groups.items():
        ep = cfg.verifier if g < 0 else cfg.generators[g]
        if cfg.critique.extra_body is not None:
            ep = dataclasses.replace(ep, extra_body=cfg.critique.extra_body)
        jc = JudgeConfig(n=cfg.critique.n, policy="pessimistic", early_stop=False, run_seed=cfg.run_seed,
                         with_reference=cfg.critique.with_reference,
                         template=cfg.critique.template or ("verify" if cfg.critic == "verifier" else "critique_proof"),
                         temperature=cfg.critique.temperature, top_p=cfg.critique.top_p,
                         max_tokens=cfg.critique.max_tokens)
        js = judge_trajectories([versions[i] for i in idx], OpenAIEngine(ep), jc)
        for i, j in zip(idx, js):
            rejecting = [p for p in j.passes if p.ok and p.verdict is not None and p.verdict.value == "invalid"]
            shown = rejecting or [p for p in j.passes if p.ok] or j.passes
            out[i] = {"model": ep.model, "status": j.status, "verdict": j.verdict.value,
                      "accepted": j.aggregate.accepts, "n_passes": j.aggregate.n_passes,
                      "n_unparseable": j.aggregate.n_unparseable, "first_error_step": j.first_error_step,
                      "rationale": "\n\n".join(p.rationale.strip() for p in shown if p.rationale.strip())[:8000],
                      "parse_status": [p.status.value for p in j.passes]}
    return out  # type: ignore[return-value]


def version_fate(c: Completion, reasoning_format: str = "think") -> str:
    """What a generated version becomes: ``keep`` (into candidates.jsonl), ``retry`` (a failed request:
    not written, the next run retries it), or the reason it is skipped (``prompt_too_long``, ``empty_proof``,
    ``unfinished_thinking``: a thinking generator's reasoning never ended, so there is no proof).

    >>> [version_fate(c) for c in (Completion("Step 0: a"), Completion(status="request_failed"),
    ...                            Completion(status="too_long"), Completion("  "), Completion("<think>hm"))]
    ['keep', 'retry', 'prompt_too_long', 'empty_proof', 'unfinished_thinking']
    """
    if c.status == "request_failed":
        return "retry"
    if c.status == "too_long":
        return "prompt_too_long"
    steps = proof_steps_of(c.text, reasoning_format, c.reasoning)
    if steps is None:
        return "unfinished_thinking"
    return "keep" if any(x.strip() for x in steps) else "empty_proof"


def revision_fate(crit: dict[str, Any], stop_when_accepted: bool) -> str:
    """Whether a critiqued version is revised: ``revise``, ``retry`` (the critic's request failed: the next
    run retries it), or the reason the revision is skipped (``critic_failed``: no usable critique;
    ``accepted_by_critic`` with ``stop_when_accepted``).

    >>> c = {"status": "ok", "n_passes": 2, "n_unparseable": 0, "accepted": True}
    >>> revision_fate(c, True), revision_fate(c, False), revision_fate({**c, "n_unparseable": 2}, True)
    ('accepted_by_critic', 'revise', 'critic_failed')
    >>> revision_fate({**c, "status": "request_failed"}, True)
    'retry'
    """
    if crit["status"] == "request_failed":
        return "retry"
    if crit["n_unparseable"] == crit["n_passes"]:
        return "critic_failed"
    if crit["accepted"] and stop_when_accepted:
        return "accepted_by_critic"
    return "revise"


def revision_prompt(problem: str, c: Condition) -> str:
    """The revision prompt (``revise_proof.j2``) of a version from its critique."""
    return render("revise_proof", problem=problem, proof_steps=list(c.proof_steps), verdict=c.verdict,
                  critique=c.critique, first_error_step=c.first_error_step)


def _prompt(t: GenTask) -> str:
    return generation_prompt(t.problem.problem) if t.condition is None else revision_prompt(t.problem.problem,
                                                                                            t.condition)


def _condition(chunk: list[GenTask], cfg: CandidatesConfig) -> list[GenTask | Outcome]:
    """Critique each parent of a chunk of revisions; condition the revision on its critique, or skip it."""
    out: list[GenTask | Outcome] = []
    for t, crit in zip(chunk, _critique([t.meta for t in chunk], cfg)):
        parent: ProofTrajectory = t.meta
        fate = revision_fate(crit, cfg.stop_when_accepted)
        if fate == "retry":
            out.append(Outcome(counts={"critic_request_failed": 1}))
        elif fate != "revise":
            out.append(Outcome({"id": t.id, "reason": fate, "parent_id": parent.id, "critique": crit}, rejected=True,
                               counts={fate: 1}))
        else:
            cond = Condition(parent.id, tuple(parent.proof_steps), crit["rationale"] or "(no rationale)",
                             crit["verdict"], crit["first_error_step"] if crit["verdict"] == "invalid" else NO_STEP)
            out.append(dataclasses.replace(t, condition=cond, meta=(parent, crit)))
    return out


def _outcome(t: GenTask, c: Completion, g: int, cfg: CandidatesConfig) -> Outcome:
    """A generated version as a candidate row or a skip row (``version_fate`` decides)."""
    parent, crit = t.meta if t.round else (None, None)
    fate = version_fate(c, cfg.reasoning_format)
    if fate == "retry":
        return Outcome(counts={"request_failed": 1})
    if fate != "keep":
        return Outcome({"id": t.id, "reason": fate, "parent_id": parent.id if parent else None,
                        "detail": c.error or "", "text": c.text}, rejected=True, counts={fate: 1})
    v = _trajectory(t.problem, g, cfg.generators[g].model, t.sample, t.round,
                    proof_steps_of(c.text, cfg.reasoning_format, c.reasoning) or [],
                    parent.id if parent else None, crit, cfg.critic if parent else None)
    v.meta["candidate"]["finish_reason"] = c.finish_reason  # "length": cut at max_tokens
    v.meta["candidate"]["temperature"] = cfg.temperatures[g] if cfg.temperatures else cfg.temperature
    return Outcome(v.to_dict(), counts={"truncated": int(c.finish_reason == "length"), f"written_round_{t.round}": 1})


def _load_done(path: Path, skipped: Path) -> tuple[dict[str, ProofTrajectory], set[str]]:
    done: dict[str, ProofTrajectory] = {}
    if path.exists():
        truncate_partial_last_line(path)  # drop a half-written last line left by a kill
        done = {t.id: t for t in load_trajectories(path).records}
    skip: set[str] = set()
    if skipped.exists():
        truncate_partial_last_line(skipped)
        skip = {str(r["id"]) for r in read_jsonl(skipped)}
    return done, skip


@holds_output()
def run(cfg: CandidatesConfig) -> dict[str, Any]:
    """Generate, critique and revise; append every version; returns the summary (also written)."""
    if not cfg.problems or not cfg.out:
        raise InputError("candidates config: problems=PATH and out=DIR are required")
    if not cfg.generators:
        raise InputError("candidates config, field 'generators': at least one generator endpoint is required")
    if cfg.k < 1 or cfg.rounds < 0 or cfg.batch_size < 1 or cfg.critique.n < 1:
        raise InputError("candidates config: k, batch_size and critique.n must be >= 1, rounds >= 0")
    if cfg.temperatures and len(cfg.temperatures) != len(cfg.generators):
        raise InputError(f"candidates config, field 'temperatures': one per generator ({len(cfg.generators)}), got "
                         f"{len(cfg.temperatures)}")
    if cfg.critic not in ("self", "verifier"):
        raise InputError(f"candidates config, field 'critic': use self or verifier, got {cfg.critic!r}")
    problems = load_proofbench_problems(cfg.problems)[: cfg.limit]
    if not problems:
        raise InputError(f"{cfg.problems}: no problems")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    path, skipped_path = out / "candidates.jsonl", out / "skipped.jsonl"
    done, skip = _load_done(path, skipped_path)
    resumed = len(done) + len(skip)
    engines = [OpenAIEngine(ep) for ep in cfg.generators]
    gen_cfgs = [GenerationConfig(temperature=cfg.temperatures[g] if cfg.temperatures else cfg.temperature,
                                 top_p=cfg.top_p, max_tokens=cfg.max_tokens, run_seed=cfg.run_seed,
                                 chunk_size=cfg.batch_size) for g in range(len(cfg.generators))]
    stats: Counter = Counter()
    total = len(problems) * len(cfg.generators) * cfg.k * (cfg.rounds + 1)
    by_pid = {p.id: p for p in problems}
    for rnd in range(cfg.rounds + 1):
        for g, engine in enumerate(engines):
            if rnd == 0:
                tasks = [GenTask(p, s, 0, generator=g) for p in problems for s in range(cfg.k)]
            else:  # the versions of the previous round (the runner skips those revised or stopped already)
                tasks = [GenTask(by_pid[p.id], s, rnd, generator=g, meta=done[parent]) for p in problems
                         for s in range(cfg.k) if (parent := version_id(p.id, s, rnd - 1, generator=g)) in done]
            res = generate(tasks, engine, gen_cfgs[g], path, rejects=skipped_path, prompt=_prompt,
                         condition=(lambda chunk: _condition(chunk, cfg)) if rnd else None,
                         outcome=lambda pairs, g=g: [_outcome(t, c, g, cfg) for t, c in pairs],
                         progress=cfg.progress, desc=f"candidates (generator {g}, round {rnd})", budget_key="max_tokens")
            stats.update(outcome_counts(res))
        done, skip = _load_done(path, skipped_path)  # this round's versions: the next round's parents
    rounds = Counter(t.meta["candidate"]["round"] for t in done.values())
    reasons = Counter(r["reason"] for r in read_jsonl(skipped_path)) if skipped_path.exists() else Counter()
    summary = {
        "problems": len(problems), "generators": [ep.model for ep in cfg.generators], "k": cfg.k,
        "temperatures": [c.temperature for c in gen_cfgs],
        "rounds": cfg.rounds, "critic": cfg.critic, "resumed_done": resumed, "this_run": dict(stats),
        "candidates_total": len(done), "by_round": {str(k): v for k, v in sorted(rounds.items())},
        "skipped_by_reason": dict(sorted(reasons.items())), "versions_planned": total,
        "missing": sum(1 for p in problems for g in range(len(cfg.generators)) for s in range(cfg.k)
                       for r in range(cfg.rounds + 1)
                       if (r == 0 or version_id(p.id, s, r - 1, generator=g) in done)
                       and version_id(p.id, s, r, generator=g) not in done
                       and version_id(p.id, s, r, generator=g) not in skip),
    }
    (out / "candidates_summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def main() -> None:
    """Hydra app: ``python -m data_pipeline.candidates problems=PATH out=DIR``."""
    @hydra_main("candidates", CandidatesConfig)
    def _run(cfg: CandidatesConfig) -> None:
        s = run(cfg)
        print(f"candidates: {s['candidates_total']} proofs of {s['problems']} problems by round {s['by_round']}; "
              f"skipped {s['skipped_by_reason']}; missing {s['missing']} (re-run to retry); "
              f"output: {Path(cfg.out) / 'candidates.jsonl'}")

    _run()


if __name__ == "__main__":
    main()
