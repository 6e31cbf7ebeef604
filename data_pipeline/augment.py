"""Positive-sample augmentation by proof repair (section 4.2).

``python -m data_pipeline.augment input=PATH out=DIR generator.base_url=URL generator.model=M
'verifiers=[{base_url: URL, model: V}]' [verify.n=8] [attempts=1]``

For each invalid annotated trajectory with expert correction suggestions, the generator
(a configured model, or with ``own_model=true`` the proof's own ``generator`` mapped through
``model_map`` to a served model) is prompted with ``verifier.templates.repair_prompt``; the
answer is split into steps with ``split_proof_steps``; each repair is verified by every
verifier endpoint with ``verify.n`` passes under the pessimistic policy (the one runner
``verifier.runner.judge`` with the one judge config ``verify``, ``verifier.aggregate``): accepted only if every verifier accepts in every pass. Accepted
repairs become positive samples (``positives.jsonl``: same problem id, annotation with no
fatal error, provenance in ``meta.augmentation``: parent id, repair model, verifier votes);
rejected repairs and their reasons go to ``rejected.jsonl``; trajectories that are not
candidates are counted in ``augment_summary.json``.

Resumable: work runs in batches of ``batch_size`` trajectories; each result is appended and
fsynced (``JsonlAppender``) and a restarted run skips every (parent, attempt) already in
either file, so a crash loses at most the batch in flight. Seeds are per (parent, attempt).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from verifier.budget import check_budget
from verifier.engine import EndpointConfig, GenerationRequest, OpenAIEngine, SamplingConfig, base_seed
from verifier.errors import InputError
from verifier.formats import load_any
from verifier.judging import JudgeConfig
from verifier.judgment import Judgment
from verifier.outputs import holds_output
from verifier.records import NO_STEP, Annotation, ProofTrajectory
from verifier.templates import as_messages, repair_prompt, split_proof_steps


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
    verifiers: list[EndpointConfig] = field(default_factory=lambda: [EndpointConfig()])
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
        id=f"{parent.id}-repair{attempt}",
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


def _done_keys(*paths: Path) -> set[tuple[str, int]]:
    from verifier.io import read_jsonl, truncate_partial_last_line

    done = set()
    for p in paths:
        if not p.exists():
            continue
        truncate_partial_last_line(p)  # drop a half-written last line left by a crash
        for r in read_jsonl(p):
            aug = (r.get("meta") or {}).get("augmentation") or r
            done.add((str(aug["parent_id"]), int(aug["attempt"])))
    return done


def vote(verifier: str, j: Judgment) -> dict[str, Any]:
    """One verifier's decision on one repair (the row the runner returns for it)."""
    a = j.aggregate
    return {"id": j.id, "verifier": verifier, "status": j.status, "verdict": a.verdict.value, "accepted": a.accepts,
            "n_passes": a.n_passes, "n_accept": a.n_accept, "n_reject": a.n_reject, "n_unparseable": a.n_unparseable,
            "first_error_step": a.first_error_step,
            "pass_verdicts": [p.verdict.value if p.verdict else p.status.value for p in j.passes]}


def _verify(repairs: list[ProofTrajectory], cfg: AugmentConfig) -> list[list[dict[str, Any]]]:
    """Votes of every verifier on every repair: the one runner once per verifier (seeds differ by verifier).

    A repair whose requests failed gets a ``request_failed`` vote (not a decision: retried next run).
    """
    import dataclasses

    from verifier.runner import judge

    votes: list[list[dict[str, Any]]] = [[] for _ in repairs]
    if not repairs:
        return votes
    for k, ep in enumerate(cfg.verifiers):
        jc = dataclasses.replace(cfg.verify, run_seed=cfg.verify.run_seed + 1000 * k)
        res = judge(repairs, OpenAIEngine(ep), jc, None, to_row=lambda j, m=ep.model: vote(m, j))
        for i, (r, j) in enumerate(zip(repairs, res.judgments)):
            votes[i].append(res.rows[r.id] if r.id in res.rows else vote(ep.model, j))
    return votes


@holds_output()
def run(cfg: AugmentConfig) -> dict[str, Any]:
    """Repair, verify, and append accepted/rejected repairs; returns the summary (also written)."""
    from tqdm import tqdm

    from verifier.io import JsonlAppender

    if not cfg.input or not cfg.out:
        raise InputError("augment config: input=PATH and out=DIR are required")
    if not cfg.verifiers:
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
    done = _done_keys(pos_path, rej_path)
    work = [(t, a) for t in cands for a in range(cfg.attempts) if (t.id, a) not in done]
    resumed = len(cands) * cfg.attempts - len(work)
    engine = OpenAIEngine(cfg.generator)
    sampling = SamplingConfig(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens)
    stats = Counter()
    bar = tqdm(total=len(work), desc="repair+verify", unit="repair", disable=not cfg.progress)
    with JsonlAppender(pos_path) as pos, JsonlAppender(rej_path) as rej:
        for b in range(0, len(work), cfg.batch_size):
            batch = work[b: b + cfg.batch_size]
            models = [repair_model_for(t, cfg) for t, _ in batch]
            reqs = [GenerationRequest(as_messages(repair_prompt(t)), n=1,
                                      seed=base_seed(f"repair:{t.id}:{a}", cfg.run_seed), key=t.id, model=m)
                    for (t, a), m in zip(batch, models)]
            check_budget(engine, sampling.max_tokens, reqs)
            outs = engine.generate(reqs, sampling)
            pending: list[tuple[ProofTrajectory, int, str, list[str], str]] = []
            for (t, a), m, [c] in zip(batch, models, outs):
                base = {"parent_id": t.id, "attempt": a, "repair_model": m, "text": c.text}
                if c.status != "ok":
                    # a failed request is not a decision: not written, so a re-run retries it
                    stats[f"generation_{c.status}"] += 1
                    if c.status == "too_long":
                        rej.write({**base, "reason": "prompt_too_long", "detail": c.error})
                    continue
                steps = split_proof_steps(c.text) if c.text.strip() else []
                if len(steps) < cfg.min_steps or not any(s.strip() for s in steps):
                    rej.write({**base, "reason": "unparseable_repair", "detail": f"{len(steps)} steps"})
                    stats["rejected"] += 1
                    continue
                pending.append((t, a, m, steps, c.text))
            repairs = [repaired_trajectory(t, steps, m, a, []) for t, a, m, steps, _ in pending]
            votes = _verify(repairs, cfg)
            for (t, a, m, steps, text), vs in zip(pending, votes):
                if any(v["status"] == "request_failed" for v in vs):
                    stats["verification_request_failed"] += 1  # retried on the next run
                    continue
                if all(v["accepted"] for v in vs):
                    pos.write(repaired_trajectory(t, steps, m, a, vs).to_dict())
                    stats["accepted"] += 1
                else:
                    rej.write({"parent_id": t.id, "attempt": a, "repair_model": m, "text": text,
                               "proof_steps": steps, "reason": "verifier_rejected", "verifier_votes": vs})
                    stats["rejected"] += 1
            bar.update(len(batch))
            bar.set_postfix(dict(stats), refresh=False)
    bar.close()
    summary = {
        "input": cfg.input, "trajectories": len(trajs), "candidates": len(cands), "attempts": cfg.attempts,
        "not_candidates": dict(not_cand), "resumed_done": resumed, "this_run": dict(stats),
        "positives_total": _count(pos_path), "rejected_total": _count(rej_path),
        "verifiers": [v.model for v in cfg.verifiers], "passes_per_verifier": cfg.verify.n,
    }
    (out / "augment_summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def _count(path: Path) -> int:
    return sum(1 for line in open(path, encoding="utf-8") if line.strip()) if path.exists() else 0


def main() -> None:
    """Hydra app: ``python -m data_pipeline.augment input=PATH out=DIR``."""
    from verifier.config import hydra_main

    @hydra_main("augment", AugmentConfig)
    def _run(cfg: AugmentConfig) -> None:
        s = run(cfg)
        print(f"augment: {s['candidates']} candidates x {s['attempts']} attempts; this run {s['this_run']}; "
              f"resumed {s['resumed_done']}; positives={s['positives_total']} rejected={s['rejected_total']} "
              f"in {cfg.out}")

    _run()


if __name__ == "__main__":
    main()
