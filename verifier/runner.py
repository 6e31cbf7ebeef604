"""THE judging runner: records in, judgments streamed to one JSONL, resumable (section 4.4).

This module owns the loop: the item type (``Item``, ``verification_item``), the passes of one item
(``judge_item``: cache, waves, early stop), the batcher over batch-only engines (``_Batcher``) and the
loop over records (``judge``; ``judge_trajectories`` in memory). The record it writes is
``verifier.judgment.Judgment`` (one row format); how to judge is ``verifier.judging.JudgeConfig``.

Every command that judges calls ``judge`` (``eval.judge``, ``eval.verifierbench``, ``eval.proverbench``,
``data_pipeline.selection``, ``data_pipeline.augment``, the IneqMath / TCS-Bench / ProofJudge judges)::

    from verifier.runner import judge
    res = judge(trajs, engine, JudgeConfig(n=8), out="judgments.jsonl", cache=PassCache(...),
                columns=lambda t: {"problem_id": t.problem_id}, post=meta_grade, post_ok=graded)
    res.summary  # counts of every status;  res.rows: id -> row;  res.judgments: this call's judgments
    res.judged()  # id -> Judgment of every row (resumed and new, post-step fields included): score in memory

For each record not already complete in ``out``:

* passes = pass-cache hits + engine requests in waves, early stop when the policy is decided
  (``judge_item``: seeds per pass, ``too_long`` / ``request_failed`` explicit);
* ``row = judgment.to_row() | columns(record) | post(record, row)`` (``post`` may be async:
  the meta-verifier grade, the repair check, a step judge); the row is appended and fsynced;
* a judgment whose request failed is not written (counted as ``failed``; a re-run redoes it,
  the passes that did succeed come from the cache).

Resume (kill-safe): a torn last line is dropped; records whose row is in ``out`` are skipped, so each
(record, pass) is in the file exactly once. A row whose post-step failed (``post_ok(row)`` false, e.g.
a null meta grade) is kept on disk as a counted failure; the next run takes it out of the file and
re-runs only ``post`` on the stored passes (no pass is generated again).

One writer: the whole call holds the exclusive lock of ``out`` (``verifier.outputs.lock_output``); a
second process on the same ``out`` stops with ``OutputLocked`` before the file is touched.

``out=None`` judges in memory (``judge_trajectories``, the template judges).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from verifier.aggregate import AggregationPolicy, aggregate, decided
from verifier.budget import check_budget
from verifier.config import Sampling
from verifier.engine import Completion, Engine, GenerationRequest, base_seed, run_sync
from verifier.errors import InputError
from verifier.io import JsonlAppender, iter_jsonl, truncate_partial_last_line, write_jsonl
from verifier.judging import JudgeConfig, PassCache, engine_fingerprint, wave_plan
from verifier.judgment import Judgment
from verifier.outputs import lock_output
from verifier.parser import parse_completion
from verifier.records import ProofTrajectory, VerificationOutput
from verifier.templates import as_messages, verification_prompt

Row = dict[str, Any]
Post = Callable[[Any, Row], "Row | Awaitable[Row]"]


# ---------------------------------------------------------------------------------- submission


Submit = Callable[[GenerationRequest], Awaitable[list[Completion]]]


class _Batcher:
    """Per-request submission on top of a batch-only engine (``agenerate``): requests that are
    submitted while a batch runs form the next batch (e.g. the vLLM offline engine)."""

    def __init__(self, engine: Engine, sampling: Sampling):
        self.engine, self.sampling = engine, sampling
        self.queue: list[tuple[GenerationRequest, asyncio.Future]] = []
        self.task: asyncio.Task | None = None

    async def __call__(self, req: GenerationRequest) -> list[Completion]:
        fut = asyncio.get_running_loop().create_future()
        self.queue.append((req, fut))
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._drain())
        return await fut

    async def _drain(self) -> None:
        while self.queue:
            size = -1
            while size != len(self.queue):  # let every ready coroutine enqueue first
                size = len(self.queue)
                await asyncio.sleep(0)
            batch, self.queue = self.queue, []
            try:
                results = await self.engine.agenerate([r for r, _ in batch], self.sampling)
            except Exception as e:  # noqa: BLE001 - handed to every waiting caller
                for _, f in batch:
                    if not f.done():
                        f.set_exception(e)
                continue
            for (_, f), res in zip(batch, results):
                if not f.done():
                    f.set_result(res)


@contextlib.asynccontextmanager
async def _submitter(engine: Engine, sampling: Sampling):
    if hasattr(engine, "session"):
        async with engine.session(sampling) as submit:  # type: ignore[attr-defined]
            yield submit
    else:
        yield _Batcher(engine, sampling)


# ------------------------------------------------------------------------------------- judging


@dataclass
class Item:
    """One thing to judge: an id (resume key, request key), its prompt, and how a completion is read.

    ``seed_key`` names the seed stream (pass k has seed ``base_seed(seed_key, run_seed) + k``);
    ``parse(completion)`` returns a ``VerificationOutput`` (aggregated under the policy) or another
    parsed answer (``JudgeAnswer``; None when the judge's parser is ``none``: raw text).
    """

    id: str
    prompt: str
    parse: Callable[[Completion], Any]
    seed_key: str = ""
    columns: dict[str, Any] = field(default_factory=dict)  # written with the row (e.g. the prompt's choices)


def verification_item(traj: ProofTrajectory, cfg: JudgeConfig) -> Item:
    """The verification prompt of a trajectory (template and reference solution from ``cfg``).

    The row records the prompt's choices: ``template`` and ``with_reference`` (true only when the
    reference solution was in the prompt, i.e. configured and present).
    """
    n_steps = len(traj.proof_steps)
    prompt = verification_prompt(traj, with_reference=cfg.with_reference, template=cfg.template)
    used_ref = bool(cfg.with_reference and traj.reference_solution)
    return Item(traj.id, prompt, lambda c: _to_output(c, n_steps), traj.id,
                {"template": cfg.template, "with_reference": used_ref})


def _to_output(c: Completion, n_steps: int) -> VerificationOutput:
    return parse_completion(c.text, c.finish_reason, c.reasoning, n_steps, status=c.status, error=c.error)


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs ``(start, length)`` of sorted pass indices."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def _aggregable(outputs: Sequence[Any]) -> bool:
    return bool(outputs) and all(hasattr(o, "accepts") and hasattr(o, "first_error_step") for o in outputs)


async def judge_item(item: Item, submit: Submit, cfg: JudgeConfig, policy: AggregationPolicy,
                     sampling: Sampling, fingerprint: str, cache: PassCache | None) -> Judgment:
    """The passes of one item: pass cache hits, then engine requests wave by wave (early stop)."""
    messages = as_messages(item.prompt)
    phash = hashlib.sha256(item.prompt.encode()).hexdigest()
    base = base_seed(item.seed_key or item.id, cfg.run_seed)
    plan = wave_plan(cfg.n, cfg.waves if cfg.early_stop else None)
    outputs: list[Any] = []
    completions: list[Completion] = []
    n_cached = 0
    status = "ok"
    for start, m in plan:
        wave: dict[int, Completion] = {}
        keys = {i: PassCache.key(fingerprint, phash, sampling, base + i, i) for i in range(start, start + m)}
        if cache is not None:
            for i, k in keys.items():
                c = cache.get(k)
                if c is not None:
                    wave[i] = c
                    n_cached += 1
        missing = [i for i in range(start, start + m) if i not in wave]
        for s, length in _runs(missing):
            got = await submit(GenerationRequest(messages, n=length, seed=base + s, key=item.id, model=cfg.model))
            if len(got) != length:
                got = [Completion(status="request_failed", error=f"expected {length} samples, got {len(got)}")] * length
            for j, c in enumerate(got):
                wave[s + j] = c
            if cache is not None:
                cache.put_many([(keys[s + j], c) for j, c in enumerate(got)])
        for i in range(start, start + m):
            completions.append(wave[i])
            outputs.append(item.parse(wave[i]))
        if any(c.status == "request_failed" for c in completions):
            status = "request_failed"
            break
        if any(c.status == "too_long" for c in completions):
            status = "too_long"
            break  # the same prompt is too long for every pass
        if len(outputs) < cfg.n and cfg.early_stop and _aggregable(outputs) and decided(outputs, policy):
            break
    agg = aggregate(outputs, policy) if _aggregable(outputs) else None
    return Judgment(
        id=item.id, aggregate=agg, passes=outputs, seeds=[base + i for i in range(len(outputs))],  # type: ignore[arg-type]
        completion_tokens=[c.completion_tokens for c in completions], status=status,
        early_stopped=status == "ok" and len(outputs) < cfg.n, policy=cfg.policy, n=cfg.n,
        model=fingerprint.split("|")[0], cached_passes=n_cached, completions=completions,
    )


@dataclass
class RunResult:
    """What ``judge`` returns: the summary counts, every record's row, this call's judgments."""

    summary: dict[str, Any]
    rows: dict[str, Row] = field(default_factory=dict)  # id -> row (resumed and new; failed ones absent)
    judgments: list[Judgment | None] = field(default_factory=list)  # input order; None: resumed from ``out``

    def judged(self) -> dict[str, Judgment]:
        """Every row as the judgment record (resumed and new, with the post-step's fields), by id."""
        return {i: Judgment.from_row(r) for i, r in self.rows.items()}

    def ordered_rows(self, records: Sequence[Any], id_of: Callable[[Any], str] = lambda r: r.id) -> list[Row]:
        """The rows of ``records`` in input order (records without a row are left out)."""
        return [self.rows[id_of(r)] for r in records if id_of(r) in self.rows]


def read_rows(path: str | os.PathLike) -> dict[str, Row]:
    """Rows of a runner output by id (a torn last line is ignored; a later row of an id wins)."""
    rows: dict[str, Row] = {}
    p = Path(path)
    if not p.exists():
        return rows
    for _, obj in iter_jsonl(p):
        if isinstance(obj, dict) and "id" in obj:
            rows[str(obj["id"])] = obj
    return rows


def read_judgments(path: str | os.PathLike) -> dict[str, Judgment]:
    """The judgment records of a runner output by id (``read_rows``, each row read by ``Judgment.from_row``)."""
    return {i: Judgment.from_row(r) for i, r in read_rows(path).items()}


def done_ids(path: str | os.PathLike) -> set[str]:
    """Ids already written to a resumable output (a half-written last line is ignored)."""
    return set(read_rows(path))


def new_summary() -> Counter:
    return Counter({k: 0 for k in ("records", "already_done", "judged", "written", "failed", "too_long",
                                   "early_stopped", "post_redone", "post_failed", "generated_passes",
                                   "cached_passes", "tokens", "truncated_passes", "unclosed_thinking_passes")})


def _count_judgment(c: Counter, status: Counter, pass_status: Counter, j: Judgment) -> None:
    status[j.status] += 1
    for i, p in enumerate(j.passes):
        st = getattr(getattr(p, "status", None), "value", None)
        if st is None:  # parser "none": the completion's own status
            st = j.completions[i].status if i < len(j.completions) else "unknown"
        pass_status[st] += 1
    if not j.complete:
        c["failed"] += 1
        return
    c["judged"] += 1
    c["too_long"] += j.status == "too_long"
    c["early_stopped"] += bool(j.early_stopped)
    c["cached_passes"] += j.cached_passes
    c["generated_passes"] += len(j.passes) - j.cached_passes
    c["tokens"] += j.tokens
    c["truncated_passes"] += sum(getattr(getattr(p, "status", None), "value", "") == "truncated" for p in j.passes)
    c["unclosed_thinking_passes"] += sum(getattr(getattr(p, "status", None), "value", "") == "unclosed_thinking"
                                         for p in j.passes)


async def _maybe_await(x: Any) -> Any:
    return await x if inspect.isawaitable(x) else x


async def ajudge(
    records: Sequence[Any],
    engine: Engine,
    cfg: JudgeConfig,
    out: str | os.PathLike | None = None,
    *,
    item: Callable[[Any, JudgeConfig], Item] = verification_item,
    to_row: Callable[[Judgment], Row] = Judgment.to_row,
    columns: Callable[[Any], Row] | None = None,
    post: Post | None = None,
    post_ok: Callable[[Row], bool] | None = None,
    cache: PassCache | None = None,
    on_judgment: Callable[[Judgment], None] | None = None,
    progress: bool = False,
    desc: str | None = None,
) -> RunResult:
    """``judge`` (async); see the module docstring."""
    if out is None:
        return await _ajudge(records, engine, cfg, None, item=item, to_row=to_row, columns=columns, post=post,
                             post_ok=post_ok, cache=cache, on_judgment=on_judgment, progress=progress, desc=desc)
    with lock_output(out):  # one writer per output, held from the start-up repairs to the last row
        return await _ajudge(records, engine, cfg, out, item=item, to_row=to_row, columns=columns, post=post,
                             post_ok=post_ok, cache=cache, on_judgment=on_judgment, progress=progress, desc=desc)


async def _ajudge(records: Sequence[Any], engine: Engine, cfg: JudgeConfig, out: str | os.PathLike | None, *,
                  item: Callable[[Any, JudgeConfig], Item], to_row: Callable[[Judgment], Row],
                  columns: Callable[[Any], Row] | None, post: Post | None, post_ok: Callable[[Row], bool] | None,
                  cache: PassCache | None, on_judgment: Callable[[Judgment], None] | None, progress: bool,
                  desc: str | None) -> RunResult:
    t0 = time.monotonic()
    items = [item(r, cfg) for r in records]
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        dup = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        raise InputError(f"record {dup!r}, field 'id': duplicate id (seeds and resume are keyed by id)")
    c = new_summary()
    status: Counter = Counter()
    pass_status: Counter = Counter()
    c["records"] = len(records)
    rows: dict[str, Row] = {}
    redo: dict[str, Row] = {}  # rows whose post-step failed: post again on the stored passes
    path = Path(out) if out is not None else None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        truncate_partial_last_line(path)
        on_disk = read_rows(path)
        wanted = set(ids)
        if post is not None and post_ok is not None:
            redo = {i: r for i, r in on_disk.items() if i in wanted and not post_ok(r)}
        if redo:  # take them out of the file (atomically) before anything is appended
            write_jsonl(path, [r for i, r in on_disk.items() if i not in redo])
        rows = {i: r for i, r in on_disk.items() if i in wanted and i not in redo}
    c["already_done"] = len(rows)
    judgments: list[Judgment | None] = [None] * len(records)
    policy, sampling = cfg.aggregation(), cfg.sampling()
    fingerprint = engine_fingerprint(engine, cfg.model)
    todo = [it for it in items if it.id not in rows and it.id not in redo]
    if todo:  # a budget that cannot fit max_model_len stops the run here, not as n x too_long
        check_budget(engine, sampling.max_tokens,
                     [GenerationRequest(as_messages(it.prompt), key=it.id, model=cfg.model) for it in todo],
                     what="judge.max_tokens")
    bar = None
    if progress:
        bar = tqdm(total=len(records), initial=len(rows), desc=desc or f"judge n={cfg.n} {cfg.policy}", unit="proof")
    app = JsonlAppender(path) if path is not None else None
    gate = asyncio.Semaphore(max(1, cfg.max_concurrency))
    post_gate = asyncio.Semaphore(max(1, cfg.max_concurrency))  # post-steps in flight (e.g. meta-verifier calls)

    async def finish(rec: Any, row: Row) -> None:
        if post is not None:
            async with post_gate:
                row.update(await _maybe_await(post(rec, row)))
            if post_ok is not None and not post_ok(row):
                c["post_failed"] += 1
        if app is not None:
            app.write(row)
        c["written"] += 1
        rows[str(row["id"])] = row

    async def one(k: int, rec: Any, it: Item, submit) -> None:
        if it.id in redo:
            c["post_redone"] += 1
            await finish(rec, dict(redo[it.id]))
        else:
            async with gate:
                j = await judge_item(it, submit, cfg, policy, sampling, fingerprint, cache)
            judgments[k] = j
            _count_judgment(c, status, pass_status, j)
            if on_judgment is not None:
                on_judgment(j)
            if j.complete:
                row = to_row(j)
                row.update(it.columns)
                if columns is not None:
                    row.update(columns(rec))
                await finish(rec, row)
        if bar is not None:
            bar.update(1)
            bar.set_postfix({k: v for k, v in c.items() if v and k in ("judged", "failed", "post_failed",
                                                                         "too_long", "cached_passes")},
                            refresh=False)

    try:
        todo = [(k, r, it) for k, (r, it) in enumerate(zip(records, items)) if it.id not in rows]
        if todo:
            async with _submitter(engine, sampling) as submit:
                await asyncio.gather(*(one(k, r, it, submit) for k, r, it in todo))
    finally:
        if bar is not None:
            bar.close()
        if app is not None:
            app.close()
    summary: dict[str, Any] = dict(c)
    summary["status"] = dict(sorted(status.items()))
    summary["pass_status"] = dict(sorted(pass_status.items()))
    summary["seconds"] = round(time.monotonic() - t0, 2)
    return RunResult(summary, rows, judgments)


def judge(records: Sequence[Any], engine: Engine, cfg: JudgeConfig, out: str | os.PathLike | None = None,
          **kw: Any) -> RunResult:
    """Judge ``records`` into ``out`` (resumable), or in memory when ``out`` is None; see the module docstring."""
    return run_sync(ajudge(records, engine, cfg, out, **kw))


def judge_trajectories(
    trajs: Sequence[ProofTrajectory],
    engine: Engine,
    cfg: JudgeConfig | None = None,
    cache: PassCache | None = None,
    on_judgment: Callable[[Judgment], None] | None = None,
    progress: bool = False,
) -> list[Judgment]:
    """Judge every trajectory with ``cfg.n`` passes under ``cfg.policy``; results in input order.

    In memory (nothing persisted): commands use ``verifier.runner.judge`` with an output file.
    Works with any ``Engine`` (``OpenAIEngine``: one shared client, each trajectory's next wave
    starts when its previous wave returns; batch engines such as ``VLLMOfflineEngine``: the
    requests ready at the same time form one batch). Check ``Judgment.complete`` before persisting.
    """
    res = judge(trajs, engine, cfg if cfg is not None else JudgeConfig(), None, cache=cache,
                on_judgment=on_judgment, progress=progress)
    return res.judgments  # type: ignore[return-value]
