"""Candidate proofs: k proofs per problem from each generator, improved by iterative revision (section 4.1).

``python -m data_pipeline.candidates problems=PATH out=DIR 'generators=[{base_url: URL, model: M1}, {base_url: URL, model: M2}]'
k=4 rounds=1 critic=self|verifier [verifier.base_url=URL verifier.model=V]``

For each problem (``problems.jsonl`` of ``data_pipeline.curate``, or any input of
``load_proofbench_problems``), each generator endpoint writes ``k`` proofs with the B.1 prompt
(``verifier.templates.generation_prompt``); each proof is split into steps
(``split_proof_steps``). With ``rounds=r`` each version is then revised r times (a simple
iterative revision, after Gao et al. 2025): a critic judges it — ``critic=self``: the generator
itself with ``verifier/prompts/critique_proof.j2``; ``critic=verifier``: ``verifier.n`` passes of a
verifier endpoint with the verification prompt — both through ``verifier.runner.judge_trajectories``,
and the same generator revises it from the critique (``revise_proof.j2``). With
``stop_when_accepted`` a version the critic accepts is not revised further.

Every version is kept as a ``ProofTrajectory`` without annotation in ``candidates.jsonl`` (the
``trajectories=`` input of ``data_pipeline.selection``), id ``<problem>-g<generator>-s<sample>-r<round>``,
with provenance in ``meta.candidate``: model, generator index, sample, round, parent id, the
critic and the critique (verdict, first error step, rationale) that led to the revision, and the
generation's finish reason (``length``: cut at ``max_tokens``, counted as ``truncated``).
Versions not produced are in ``skipped.jsonl`` with a reason (``empty_proof``,
``prompt_too_long``, ``accepted_by_critic``, ``critic_failed``) and counted in ``candidates_summary.json``.

Resumable: results are appended and fsynced (``JsonlAppender``) batch by batch; a restarted run
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

from verifier.budget import check_budget
from verifier.config import Sampling
from verifier.engine import EndpointConfig, GenerationRequest, OpenAIEngine, SamplingConfig, base_seed
from verifier.errors import InputError
from verifier.formats import ProofProblem, load_proofbench_problems
from verifier.outputs import holds_output
from verifier.records import NO_STEP, ProofTrajectory
from verifier.templates import as_messages, generation_prompt, render, split_proof_steps


@dataclass
class CriticConfig(Sampling):
    """How a version is critiqued before revision (``verifier.judging.JudgeConfig`` fields; sampling:
    ``verifier.config.Sampling``)."""

    n: int = 1  # passes (critic=verifier: pessimistic over n; critic=self: usually 1)
    with_reference: bool = False  # show the problem's reference solution to the critic
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
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 2048
    batch_size: int = 32  # versions per persisted batch
    limit: int | None = None  # at most this many problems (smoke runs)
    run_seed: int = 0
    progress: bool = True


def version_id(problem_id: str, g: int, sample: int, rnd: int) -> str:
    """>>> version_id("p1", 0, 2, 1)
    'p1-g0-s2-r1'
    """
    return f"{problem_id}-g{g}-s{sample}-r{rnd}"


def _trajectory(p: ProofProblem, g: int, model: str, sample: int, rnd: int, steps: list[str],
                parent: str | None, critique: dict[str, Any] | None, critic: str | None) -> ProofTrajectory:
    return ProofTrajectory(
        id=version_id(p.id, g, sample, rnd), problem_id=p.id, problem=p.problem, proof_steps=tuple(steps),
        reference_solution=p.reference_solution, subject=p.subject, split=p.split, source=p.source or "candidates",
        generator=model,
        meta={"candidate": {"model": model, "generator_index": g, "sample": sample, "round": rnd,
                            "parent_id": parent, "critic": critic, "critique": critique}},
    )


def _critique(versions: list[ProofTrajectory], cfg: CandidatesConfig) -> list[dict[str, Any]]:
    """One critique per version (verdict, first error step, rationale, status) via ``judge_trajectories``."""
    from verifier.judging import JudgeConfig
    from verifier.runner import judge_trajectories

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
                         template="verify" if cfg.critic == "verifier" else "critique_proof",
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


def _load_done(path: Path, skipped: Path) -> tuple[dict[str, ProofTrajectory], set[str]]:
    from verifier.io import load_trajectories, read_jsonl, truncate_partial_last_line

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
    from tqdm import tqdm

    from verifier.io import JsonlAppender

    if not cfg.problems or not cfg.out:
        raise InputError("candidates config: problems=PATH and out=DIR are required")
    if not cfg.generators:
        raise InputError("candidates config, field 'generators': at least one generator endpoint is required")
    if cfg.k < 1 or cfg.rounds < 0 or cfg.batch_size < 1 or cfg.critique.n < 1:
        raise InputError("candidates config: k, batch_size and critique.n must be >= 1, rounds >= 0")
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
    sampling = SamplingConfig(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens)
    stats: Counter = Counter()
    total = len(problems) * len(cfg.generators) * cfg.k * (cfg.rounds + 1)
    bar = tqdm(total=total, initial=resumed, desc="candidates", unit="proof", disable=not cfg.progress)

    def generate(jobs: list[tuple[ProofProblem, int, int, int, str, ProofTrajectory | None, dict | None]],
                 cand: JsonlAppender, skipped: JsonlAppender) -> None:
        """jobs: (problem, generator, sample, round, prompt, parent, critique); one request each."""
        by_gen: dict[int, list[int]] = {}
        for i, job in enumerate(jobs):
            by_gen.setdefault(job[1], []).append(i)
        for g, idx in by_gen.items():
            reqs = [GenerationRequest(as_messages(jobs[i][4]), n=1, key=version_id(jobs[i][0].id, g, jobs[i][2], jobs[i][3]),
                                      seed=base_seed(version_id(jobs[i][0].id, g, jobs[i][2], jobs[i][3]), cfg.run_seed))
                    for i in idx]
            check_budget(engines[g], sampling.max_tokens, reqs)
            for i, [c] in zip(idx, engines[g].generate(reqs, sampling)):
                p, _, s, rnd, _, parent, crit = jobs[i]
                vid = version_id(p.id, g, s, rnd)
                if c.status == "request_failed":  # not a decision: not written, a re-run retries it
                    stats["request_failed"] += 1
                    continue
                steps = split_proof_steps(c.text) if c.text.strip() else []
                if c.status == "too_long" or not any(x.strip() for x in steps):
                    reason = "prompt_too_long" if c.status == "too_long" else "empty_proof"
                    skipped.write({"id": vid, "reason": reason, "parent_id": parent.id if parent else None,
                                   "detail": c.error or "", "text": c.text})
                    skip.add(vid)
                    stats[reason] += 1
                    continue
                t = _trajectory(p, g, cfg.generators[g].model, s, rnd, steps, parent.id if parent else None, crit,
                                cfg.critic if parent else None)
                t.meta["candidate"]["finish_reason"] = c.finish_reason  # "length": cut at max_tokens
                stats["truncated"] += c.finish_reason == "length"
                cand.write(t.to_dict())
                done[vid] = t
                stats[f"written_round_{rnd}"] += 1
                bar.update(1)

    by_pid = {p.id: p for p in problems}
    with JsonlAppender(path) as cand, JsonlAppender(skipped_path) as skipped:
        work = [(p, g, s) for p in problems for g in range(len(cfg.generators)) for s in range(cfg.k)
                if version_id(p.id, g, s, 0) not in done and version_id(p.id, g, s, 0) not in skip]
        for b in range(0, len(work), cfg.batch_size):
            generate([(p, g, s, 0, generation_prompt(p.problem), None, None) for p, g, s in work[b: b + cfg.batch_size]],
                     cand, skipped)
        for rnd in range(1, cfg.rounds + 1):
            parents = [done[version_id(p.id, g, s, rnd - 1)] for p in problems for g in range(len(cfg.generators))
                       for s in range(cfg.k)
                       if version_id(p.id, g, s, rnd - 1) in done and version_id(p.id, g, s, rnd) not in done
                       and version_id(p.id, g, s, rnd) not in skip]
            for b in range(0, len(parents), cfg.batch_size):
                batch = parents[b: b + cfg.batch_size]
                crits = _critique(batch, cfg)
                jobs = []
                for t, crit in zip(batch, crits):
                    c = t.meta["candidate"]
                    vid = version_id(t.problem_id, c["generator_index"], c["sample"], rnd)
                    reason = None
                    if crit["status"] == "request_failed":
                        stats["critic_request_failed"] += 1  # retried on the next run
                        continue
                    if crit["n_unparseable"] == crit["n_passes"]:
                        reason = "critic_failed"  # no usable critique: nothing to revise from
                    elif crit["accepted"] and cfg.stop_when_accepted:
                        reason = "accepted_by_critic"
                    if reason:
                        skipped.write({"id": vid, "reason": reason, "parent_id": t.id, "critique": crit})
                        skip.add(vid)
                        stats[reason] += 1
                        continue
                    prompt = render("revise_proof", problem=t.problem, proof_steps=list(t.proof_steps),
                                    verdict=crit["verdict"], critique=crit["rationale"] or "(no rationale)",
                                    first_error_step=crit["first_error_step"] if crit["verdict"] == "invalid" else NO_STEP)
                    jobs.append((by_pid[t.problem_id], c["generator_index"], c["sample"], rnd, prompt, t, crit))
                generate(jobs, cand, skipped)
    bar.close()
    rounds = Counter(t.meta["candidate"]["round"] for t in done.values())
    reasons = Counter()
    if skipped_path.exists():
        from verifier.io import read_jsonl

        reasons = Counter(r["reason"] for r in read_jsonl(skipped_path))
    summary = {
        "problems": len(problems), "generators": [ep.model for ep in cfg.generators], "k": cfg.k,
        "rounds": cfg.rounds, "critic": cfg.critic, "resumed_done": resumed, "this_run": dict(stats),
        "candidates_total": len(done), "by_round": {str(k): v for k, v in sorted(rounds.items())},
        "skipped_by_reason": dict(sorted(reasons.items())), "versions_planned": total,
        "missing": sum(1 for p in problems for g in range(len(cfg.generators)) for s in range(cfg.k)
                       for r in range(cfg.rounds + 1)
                       if (r == 0 or version_id(p.id, g, s, r - 1) in done)
                       and version_id(p.id, g, s, r) not in done and version_id(p.id, g, s, r) not in skip),
    }
    (out / "candidates_summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def main() -> None:
    """Hydra app: ``python -m data_pipeline.candidates problems=PATH out=DIR``."""
    from verifier.config import hydra_main

    @hydra_main("candidates", CandidatesConfig)
    def _run(cfg: CandidatesConfig) -> None:
        s = run(cfg)
        print(f"candidates: {s['candidates_total']} proofs of {s['problems']} problems by round {s['by_round']}; "
              f"skipped {s['skipped_by_reason']}; missing {s['missing']} (re-run to retry); "
              f"output: {Path(cfg.out) / 'candidates.jsonl'}")

    _run()


if __name__ == "__main__":
    main()
