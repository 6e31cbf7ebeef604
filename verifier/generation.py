"""THE generation runner: problems in, proofs out, resumable (sections 4.1, 4.2, 5.2; the refine loop).

Every command that writes proofs with a prover calls ``generate``: ``eval.proverbench`` and its refine
rounds, ``data_pipeline.candidates`` (k samples, revision rounds) and ``data_pipeline.augment`` (repair);
judging what it wrote is ``verifier.runner``'s job::

    from verifier.generation import GenerationConfig, generate, tasks_for
    summary = generate(tasks_for(problems, samples=4), engine, GenerationConfig(max_tokens=4096), "proofs.jsonl")

* A task is one (problem, sample, round); its version id is ``verifier.identity.version_id(problem_id,
  sample, round)`` (``P-g0-s0-r0`` for round 0, ``P-g0-s0-r2`` for the second revision). Sample ``j`` of round ``r`` has the seed
  ``base_seed(version_id, run_seed)``: the same proof whatever the chunking or the resume point.
* ``condition`` (refinement, DeepSeekMath-V2 style generate -> verify -> refine): the earlier version and a
  critique of it (the rationale of a rejecting verification pass); the prompt is the ``refine_template``
  (``verifier/prompts/revise_proof.j2``, shared with the candidates' revision rounds), else the B.1 ``template``.
* Each completed proof is appended (fsynced) to ``out`` as a trajectory row: its reasoning removed
  (``reasoning_format``, ``verifier.parser.without_reasoning``), steps split on ``Step k:``
  (``proof_steps_of``); a truncated or empty proof is kept (it will be judged and rejected); a proof whose
  thinking never ended is kept with the status ``unfinished_thinking`` (never judged: not accepted); a
  failed request is not written (counted, re-done by the next run).
* Resume (kill-safe): a torn last line is dropped; tasks whose id is in ``out`` (or ``rejects``) are
  skipped, so each (problem, sample, round) is in the files exactly once. Progress: a tqdm bar with the
  status counts; the summary has them too (``outcome_counts``).

A command shapes the run with keyword arguments, the defaults being ProverBench's:

* ``prompt(task) -> str``: the prover prompt (default ``prompt_for``: B.1, or the refine template);
* ``condition(chunk) -> [GenTask | Outcome]``: called on each chunk just before it is generated, it
  conditions a task (e.g. critiques its parent and sets ``GenTask.condition``) or decides it without
  generating (an ``Outcome``: a skip row for ``rejects``, or no row to retry it next run);
* ``outcome([(task, completion)]) -> [Outcome]``: what each completion becomes (default ``proof_outcome``:
  a trajectory row); a whole chunk at once, so a command may check its proofs first (augment verifies);
* ``rejects`` (a second JSONL for rejected/skipped rows) and ``done_key(row)`` (the task id a row holds).
  ``GenTask.key`` / ``.model`` / ``.meta`` name a task, pick its served model and carry the caller's data.

Keep/skip decisions are pure functions: here ``completion_status`` (persist or not), ``proof_outcome`` and
``refine_condition`` (which judged version is revised next, conditioned on what); beside the commands
``data_pipeline.candidates.version_fate`` / ``revision_fate`` and ``data_pipeline.augment.repair_fate`` /
``verification_fate``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from verifier.budget import check_budget
from verifier.config import Sampling
from verifier.engine import Completion, Engine, GenerationRequest, base_seed
from verifier.identity import version_id
from verifier.io import JsonlAppender, iter_jsonl, truncate_partial_last_line
from verifier.parser import parse_verification, without_reasoning
from verifier.judgment import Judgment
from verifier.records import NO_STEP, ProofTrajectory, Verdict
from verifier.templates import as_messages, render, split_proof_steps


@dataclass
class GenerationConfig(Sampling):
    """Sampling of the prover (``verifier.config.Sampling``; section 5.1: temperature 1.0) and its prompts."""

    max_tokens: int = 16384
    run_seed: int = 0
    chunk_size: int = 32  # proofs requested + persisted together
    template: str = "generate_proof"  # verifier/prompts/<name>.j2 (B.1)
    refine_template: str = "revise_proof"  # the revision prompt (section 4.1): earlier proof + a rejecting pass's rationale
    critique_chars: int = 4000  # a longer critique is cut (the cut is marked)
    reasoning_format: str = "think"  # the prover's reasoning, removed before the steps: think | think_opened | none


@dataclass(frozen=True)
class Condition:
    """What a revision is conditioned on: the earlier version and a critique of it."""

    parent_id: str
    proof_steps: tuple[str, ...]
    critique: str
    verdict: str = "invalid"
    first_error_step: int = NO_STEP


@dataclass(frozen=True)
class GenTask:
    """One proof to write: sample ``sample`` of ``problem`` in refine round ``round`` (by prover ``generator``)."""

    problem: Any  # verifier.formats.ProofProblem (id, problem, reference_solution, split, subject, source)
    sample: int = 0
    round: int = 0
    condition: Condition | None = None
    key: str = ""  # the task's id where a command names its tasks itself (a repair; default: version_id)
    model: str | None = None  # the served model of its request (e.g. a LoRA adapter); None: the engine's
    meta: Any = field(default=None, compare=False)  # the command's own data (a parent, a critique) for its outcome
    generator: int = 0  # the prover's index where several write versions of one problem (candidates)

    @property
    def id(self) -> str:
        """The id of the task and of its row (the seed is drawn from it too): ``verifier.identity.version_id``."""
        return self.key or version_id(self.problem.id, self.sample, self.round, self.generator)


@dataclass(frozen=True)
class Outcome:
    """What one task comes to: a row for ``out`` (kept), a row for ``rejects`` (skipped, with its reason),
    or no row (``row is None``: not a decision, e.g. a failed request; the next run retries the task).
    ``counts``: the status counters it adds (``Counter.update``; a 0 still names the counter)."""

    row: dict[str, Any] | None = None
    rejected: bool = False
    counts: Mapping[str, int] = field(default_factory=dict)


RUN_KEYS = ("tasks", "already_done", "seconds")  # the summary's keys that are not outcome counts
DEFAULT_COUNTS = ("generated", "failed", "truncated", "too_long", "unfinished_thinking")  # proof_outcome's, always
UNFINISHED_THINKING = "unfinished_thinking"  # a proof's status when the prover's thinking never ended: never judged


def tasks_for(problems: Sequence[Any], samples: int = 1) -> list[GenTask]:
    """Round-0 tasks: ``samples`` proofs of every problem."""
    return [GenTask(p, j) for p in problems for j in range(samples)]


def prompt_for(task: GenTask, cfg: GenerationConfig) -> str:
    """The prover prompt of a task: B.1, or the refine template with the earlier proof and its critique."""
    c = task.condition
    if c is None:
        return render(cfg.template, problem=task.problem.problem)
    critique = c.critique.strip() or "(the verifier gave no rationale)"
    if len(critique) > cfg.critique_chars:
        critique = critique[: cfg.critique_chars] + " [...]"
    return render(cfg.refine_template, problem=task.problem.problem, proof_steps=list(c.proof_steps),
                  critique=critique, verdict=c.verdict,
                  first_error_step=c.first_error_step if c.first_error_step != NO_STEP else "none")


def completion_status(c: Completion) -> str | None:
    """How a completion is persisted: ``ok`` / ``truncated`` / ``too_long``; None = not written (request failed).

    >>> completion_status(Completion("x", "length")), completion_status(Completion(status="request_failed"))
    ('truncated', None)
    """
    if c.status == "request_failed":
        return None
    if c.status != "ok":
        return c.status
    return "truncated" if c.finish_reason == "length" else "ok"


def proof_steps_of(text: str, reasoning_format: str = "think", reasoning: str = "") -> list[str] | None:
    """The steps of a prover's completion that a verifier judges: its reasoning removed
    (``verifier.parser.without_reasoning``), then split on ``Step k:`` (``[""]`` for an empty proof);
    None when the thinking never ended. ProverBench's proofs and the prover reward's are read here.

    >>> proof_steps_of("<think>x = 2? no</think>Step 0: x = 1\\nStep 1: done"), proof_steps_of("<think>x = 2?")
    (['x = 1', 'done'], None)
    """
    answer = without_reasoning(text, reasoning_format, reasoning)
    if answer is None:
        return None
    return split_proof_steps(answer) if answer.strip() else [""]


def unfinished_thinking(traj: ProofTrajectory) -> bool:
    """The prover's thinking never ended: no proof, never judged, not accepted (``UNFINISHED_THINKING``)."""
    return traj.meta.get("generation_status") == UNFINISHED_THINKING


def proof_outcome(task: GenTask, c: Completion, model: str, history: Sequence[dict[str, Any]] = (),
                  reasoning_format: str = "think") -> Outcome:
    """The default outcome: every answered request is kept as a trajectory of its steps without the reasoning
    (``proof_steps_of``; truncated or empty proofs too: they are judged and rejected; a proof whose thinking
    never ended gets the status ``unfinished_thinking``: never judged, not accepted); a failed request is not
    written.

    >>> from verifier.formats import ProofProblem
    >>> t = GenTask(ProofProblem("p", "P"))
    >>> o = proof_outcome(t, Completion("Step 0: x", "length"), "m")
    >>> o.row["id"], o.row["meta"]["generation_status"], dict(o.counts)
    ('p-g0-s0-r0', 'truncated', {'generated': 1, 'truncated': 1, 'too_long': 0, 'unfinished_thinking': 0})
    >>> o = proof_outcome(t, Completion("<think>Step 0: x", "length"), "m")
    >>> o.row["proof_steps"], o.row["meta"]["generation_status"], o.counts["unfinished_thinking"]
    ([''], 'unfinished_thinking', 1)
    >>> proof_outcome(t, Completion(status="request_failed"), "m")
    Outcome(row=None, rejected=False, counts={'failed': 1})
    """
    status = completion_status(c)
    if status is None:
        return Outcome(counts={"failed": 1})
    steps = proof_steps_of(c.text, reasoning_format, c.reasoning)
    if steps is None:
        status, steps = UNFINISHED_THINKING, [""]
    row = to_trajectory(task, steps, model, status, c.finish_reason, history).to_dict()
    return Outcome(row, counts={"generated": 1, "truncated": int(status == "truncated"),
                                "too_long": int(status == "too_long"),
                                "unfinished_thinking": int(status == UNFINISHED_THINKING)})


def to_trajectory(task: GenTask, steps: Sequence[str], model: str, status: str, finish_reason: str | None,
                  history: Sequence[dict[str, Any]] = ()) -> ProofTrajectory:
    """A generated proof (its steps, ``proof_steps_of``) as a trajectory (``meta``: generation status,
    sample, round, parent, history)."""
    p = task.problem
    meta: dict[str, Any] = {"generation_status": status, "finish_reason": finish_reason, "proof_index": task.sample,
                            "round": task.round}
    if task.condition is not None:
        meta["parent_id"] = task.condition.parent_id
    if history:
        meta["history"] = list(history)
    return ProofTrajectory(
        id=task.id, problem_id=p.id, problem=p.problem, proof_steps=tuple(steps),
        reference_solution=getattr(p, "reference_solution", ""), subject=getattr(p, "subject", ""),
        split=getattr(p, "split", ""), source=getattr(p, "source", ""), generator=model, meta=meta)


def refine_condition(traj: ProofTrajectory, j: Judgment | None) -> Condition | None:
    """Revise this judged version (``j``: its judgment record)? None when it was accepted or is not judged;
    else the condition: the rationale of the first rejecting pass (a pass with a rationale when none rejects,
    e.g. all unparseable).

    >>> t = ProofTrajectory("p-g0-s0-r0", "p", "P", ("a", "b"))
    >>> refine_condition(t, Judgment.from_row({"id": "p-g0-s0-r0", "verdict": "valid", "passes": []})) is None
    True
    >>> c = refine_condition(t, Judgment.from_row({"id": "p-g0-s0-r0", "verdict": "invalid", "first_error_step": 1,
    ...     "passes": [{"verdict": "valid", "text": "fine"},
    ...                {"verdict": "invalid", "first_error_step": 1, "text": "step 1 is wrong"}]}))
    >>> c.parent_id, c.first_error_step, c.critique
    ('p-g0-s0-r0', 1, 'step 1 is wrong')
    """
    if j is None or j.verdict is Verdict.VALID:
        return None
    rejecting = [p for p in j.passes if p.verdict is Verdict.INVALID]
    chosen = (rejecting or [p for p in j.passes if p.raw_text.strip()] or [None])[0]
    critique, step = "", j.first_error_step
    if chosen is not None:
        critique = _rationale(chosen.raw_text)
        if chosen.verdict is Verdict.INVALID:
            step = chosen.first_error_step
    return Condition(traj.id, tuple(traj.proof_steps), critique, "invalid", step)


def _rationale(text: str) -> str:
    """A pass's rationale (the text before its answer block), or the raw text when it has none."""
    out = parse_verification(text)
    return (out.rationale or text).strip()


def history_entry(traj: ProofTrajectory, j: Judgment | None, condition: Condition | None) -> dict[str, Any]:
    """One earlier version for a proof's history (browser): its steps, verdict (``j``: its judgment record) and
    the critique sent back."""
    return {"id": traj.id, "round": int(traj.meta.get("round", 0)), "proof_steps": list(traj.proof_steps),
            "verdict": None if j is None or j.verdict is None else j.verdict.value,
            "accept_fraction": None if j is None else j.accept_fraction,
            "critique": None if condition is None else condition.critique,
            "first_error_step": None if condition is None else condition.first_error_step}


def row_id(row: dict[str, Any]) -> str:
    """The task id a row holds (the default ``done_key``)."""
    return str(row["id"])


def done_ids(path: str | os.PathLike, done_key: Callable[[dict[str, Any]], str] = row_id) -> set[str]:
    """Task ids already in a generation output (a torn last line is ignored)."""
    p = Path(path)
    if not p.exists():
        return set()
    return {done_key(obj) for _, obj in iter_jsonl(p) if isinstance(obj, dict)}


def outcome_counts(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The outcome counts of a ``generate`` summary (without tasks, already_done, seconds)."""
    return {k: v for k, v in summary.items() if k not in RUN_KEYS}


def generate(tasks: Sequence[GenTask], engine: Engine, cfg: GenerationConfig, out: str | os.PathLike, *,
             histories: dict[str, Sequence[dict[str, Any]]] | None = None, progress: bool = True,
             desc: str = "generate proofs",
             prompt: Callable[[GenTask], str] | None = None,
             condition: Callable[[list[GenTask]], list[GenTask | Outcome]] | None = None,
             outcome: Callable[[list[tuple[GenTask, Completion]]], list[Outcome]] | None = None,
             rejects: str | os.PathLike | None = None,
             done_key: Callable[[dict[str, Any]], str] = row_id,
             budget_key: str = "generation.max_tokens") -> dict[str, Any]:
    """Write the outcome of every task of ``tasks`` not yet in ``out`` / ``rejects``; returns ``tasks``,
    ``already_done``, ``seconds`` and the outcome counts (see the module docstring for the hooks)."""
    t0 = time.monotonic()
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"task {dup!r}, field 'id': duplicate (problem, sample, round)")
    paths = [Path(out)] + ([Path(rejects)] if rejects is not None else [])
    done: set[str] = set()
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        truncate_partial_last_line(p)
        done |= done_ids(p, done_key)
    todo = [t for t in tasks if t.id not in done]
    counts: Counter = Counter(dict.fromkeys(DEFAULT_COUNTS, 0) if outcome is None else {})
    if todo:
        write_prompt = prompt or (lambda t: prompt_for(t, cfg))
        decide = outcome or (lambda pairs: [proof_outcome(t, c, engine.model, (histories or {}).get(t.id, ()),
                                                          cfg.reasoning_format) for t, c in pairs])
        sampling = cfg.sampling()

        def requests(chunk: Sequence[GenTask]) -> list[GenerationRequest]:
            return [GenerationRequest(as_messages(write_prompt(t)), n=1, seed=base_seed(t.id, cfg.run_seed), key=t.id,
                                      model=t.model) for t in chunk]

        if condition is None:  # every prompt is known: stop before any work when none fits
            check_budget(engine, cfg.max_tokens, requests(todo), what=budget_key)
        bar = tqdm(total=len(tasks), initial=len(tasks) - len(todo), desc=desc, unit="proof") if progress else None
        try:
            with contextlib.ExitStack() as stack:
                apps = [stack.enter_context(JsonlAppender(p)) for p in paths]
                step = max(1, cfg.chunk_size)
                for start in range(0, len(todo), step):
                    chunk = todo[start:start + step]
                    results: list[Outcome] = []
                    ready = chunk
                    if condition is not None:
                        ready = []
                        for t, c in zip(chunk, condition(chunk), strict=True):
                            if isinstance(c, Outcome):
                                results.append(c)
                            elif c.id != t.id:
                                raise ValueError(f"task {t.id!r}: condition returned task {c.id!r}")
                            else:
                                ready.append(c)
                    if ready:
                        reqs = requests(ready)
                        if condition is not None:
                            check_budget(engine, cfg.max_tokens, reqs, what=budget_key)
                        pairs = [(t, c) for t, [c] in zip(ready, engine.generate(reqs, sampling), strict=True)]
                        decided = decide(pairs)
                        if len(decided) != len(pairs):
                            raise ValueError(f"outcome returned {len(decided)} outcomes for {len(pairs)} tasks")
                        results.extend(decided)
                    for o in results:
                        if o.row is not None:
                            if o.rejected and rejects is None:
                                raise ValueError("an outcome rejected a task: generate(..., rejects=PATH) is needed")
                            apps[-1 if o.rejected else 0].write(o.row)
                        counts.update(o.counts)
                    if bar is not None:
                        bar.update(len(chunk))
                        bar.set_postfix({k: v for k, v in counts.items() if v}, refresh=False)
        finally:
            if bar is not None:
                bar.close()
    summary: dict[str, Any] = {"tasks": len(tasks), "already_done": len(tasks) - len(todo), **counts}
    summary["seconds"] = round(time.monotonic() - t0, 2)
    return summary
