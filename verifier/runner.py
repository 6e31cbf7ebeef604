"""THE judging runner: records in, judgments streamed to one JSONL, resumable (section 4.4).

Every command that judges calls ``judge`` (``eval.judge``, ``eval.verifierbench``, ``eval.proverbench``,
``data_pipeline.selection``, ``data_pipeline.augment``, the IneqMath / TCS-Bench / ProofJudge judges)::

    from verifier.runner import judge
    res = judge(trajs, engine, JudgeConfig(n=8), out="judgments.jsonl", cache=PassCache(...),
                columns=lambda t: {"problem_id": t.problem_id}, post=meta_grade, post_ok=graded)
    res.summary  # counts of every status;  res.rows: id -> row;  res.judgments: this call's judgments

For each record not already complete in ``out``:

* passes = pass-cache hits + engine requests in waves, early stop when the policy is decided
  (``verifier.judging.judge_item``: seeds per pass, ``too_long`` / ``request_failed`` explicit);
* ``row = to_row(judgment) | columns(record) | post(record, row)`` (``post`` may be async:
  the meta-verifier grade, the repair check, a step judge); the row is appended and fsynced;
* a judgment whose request failed is not written (counted as ``failed``; a re-run redoes it,
  the passes that did succeed come from the cache).

Resume (kill-safe): a torn last line is dropped; records whose row is in ``out`` are skipped, so each
(record, pass) is in the file exactly once. A row whose post-step failed (``post_ok(row)`` false, e.g.
a null meta grade) is kept on disk as a counted failure; the next run takes it out of the file and
re-runs only ``post`` on the stored passes (no pass is generated again).

One writer: the whole call holds the exclusive lock of ``out`` (``verifier.outputs.lock_output``); a
second process on the same ``out`` stops with ``OutputLocked`` before the file is touched.

``out=None`` judges in memory (``verifier.judging.judge_trajectories``, the template judges).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.budget import check_budget
from verifier.engine import Engine, GenerationRequest, run_sync
from verifier.templates import as_messages
from verifier.errors import InputError
from verifier.io import JsonlAppender, iter_jsonl, truncate_partial_last_line, write_jsonl
from verifier.outputs import lock_output
from verifier.judging import (
    Item,
    JudgeConfig,
    Judgment,
    PassCache,
    _submitter,
    engine_fingerprint,
    judge_item,
    judgment_to_row,
    row_to_judgment,
    verification_item,
)

Row = dict[str, Any]
Post = Callable[[Any, Row], "Row | Awaitable[Row]"]


@dataclass
class RunResult:
    """What ``judge`` returns: the summary counts, every record's row, this call's judgments."""

    summary: dict[str, Any]
    rows: dict[str, Row] = field(default_factory=dict)  # id -> row (resumed and new; failed ones absent)
    judgments: list[Judgment | None] = field(default_factory=list)  # input order; None: resumed from ``out``

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
    to_row: Callable[[Judgment], Row] = judgment_to_row,
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
    if todo:  # a budget that cannot fit max_model_len stops the run here, not as n x too_long (issue 12.6)
        check_budget(engine, sampling.max_tokens,
                     [GenerationRequest(as_messages(it.prompt), key=it.id, model=cfg.model) for it in todo],
                     what="judge.max_tokens")
    bar = None
    if progress:
        from tqdm.auto import tqdm

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


def stored_judgment(row: Row) -> Judgment:
    """The judgment a row holds (for a post-step that needs the passes)."""
    return row_to_judgment(row)
