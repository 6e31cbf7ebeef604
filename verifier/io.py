"""JSONL reading and writing of proof trajectories, with validation.

The loader reports every bad record (id, field, line), not only the first, and
either stops (default) or skips them and counts what it skipped.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, TypeVar

from verifier.errors import UserError
from verifier.outputs import acquire, release
from verifier.records import ProofTrajectory, RecordError

T = TypeVar("T")
log = logging.getLogger(__name__)


class DatasetError(UserError, ValueError):
    """One or more bad records; ``errors`` lists each of them."""

    def __init__(self, path: str | os.PathLike, errors: list[RecordError]):
        self.path = str(path)
        self.errors = errors
        lines = "\n".join(f"  - {e}" for e in errors[:50])
        more = f"\n  ... and {len(errors) - 50} more" if len(errors) > 50 else ""
        super().__init__(f"{path}: {len(errors)} bad record(s):\n{lines}{more}")

    def cli_message(self) -> str:
        return f"{self.path}: {self.errors[0]}" if len(self.errors) == 1 else str(self)


@dataclass
class LoadResult:
    """Records that loaded, and the errors of those that were skipped."""

    records: list[ProofTrajectory]
    errors: list[RecordError] = field(default_factory=list)
    derived_problem_ids: int = 0  # records without ``problem_id``: derived from the problem text

    @property
    def skipped(self) -> int:
        return len(self.errors)

    def summary(self) -> str:
        derived = f" derived_problem_ids={self.derived_problem_ids}" if self.derived_problem_ids else ""
        return f"loaded={len(self.records)} skipped={self.skipped}{derived}"


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, object)``; a line that is not JSON yields a RecordError instead."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                yield n, RecordError(None, "<json>", f"invalid JSON: {e.msg}", n)


def load_records(path: str | os.PathLike, from_dict: Callable[..., T]) -> tuple[list[T], list[RecordError]]:
    """Validate every JSONL line with ``from_dict(obj, line=n)``; duplicate ids are errors.

    Returns the good records and one RecordError per bad line (id, field, line), never only the first.
    """
    records: list[T] = []
    errors: list[RecordError] = []
    seen: dict[str, int] = {}
    for n, obj in iter_jsonl(path):
        if isinstance(obj, RecordError):
            errors.append(obj)
            continue
        try:
            rec = from_dict(obj, line=n)
        except RecordError as e:
            errors.append(e)
            continue
        rid = str(rec.id)  # type: ignore[attr-defined]
        if rid in seen:
            errors.append(RecordError(rid, "id", f"duplicate id (first seen on line {seen[rid]})", n))
            continue
        seen[rid] = n
        records.append(rec)
    return records, errors


def load_trajectories(
    path: str | os.PathLike, on_error: Literal["raise", "skip"] = "raise"
) -> LoadResult:
    """Read our trajectory JSONL; validate each record and reject duplicate ids.

    ``on_error="raise"`` raises one DatasetError listing every bad record;
    ``"skip"`` keeps the good ones and returns the errors for reporting. A record without
    ``problem_id`` gets ``verifier.identity.problem_id_of(problem)``; the count is said once.
    """
    derived = 0

    def from_dict(obj: Any, line: int | None = None) -> ProofTrajectory:
        nonlocal derived
        rec = ProofTrajectory.from_dict(obj, line=line)
        derived += not str(obj.get("problem_id") or "").strip()
        return rec

    records, errors = load_records(path, from_dict)
    if errors and on_error == "raise":
        raise DatasetError(path, errors)
    note_derived_ids(path, derived)
    return LoadResult(records, errors, derived)


def note_derived_ids(path: str | os.PathLike, n: int) -> None:
    """Say once per file how many records got their problem id from the problem text."""
    if n:
        log.warning("%s: %d record(s) without problem_id: derived from the problem text "
                    "(verifier.identity.problem_id_of, the id the leak checks use)", path, n)


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any] | ProofTrajectory]) -> int:
    """Write rows atomically (temp file then rename); returns the number written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            if isinstance(r, ProofTrajectory):
                r = r.to_dict()
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read plain JSONL rows; a bad line raises a RecordError naming the line."""
    rows = []
    for n, obj in iter_jsonl(path):
        if isinstance(obj, RecordError):
            raise obj
        rows.append(obj)
    return rows



def load_rows(path: str | os.PathLike, required: Iterable[str], on_error: str = "raise",
              check: Callable[[dict[str, Any], str, int], None] | None = None
              ) -> tuple[list[dict[str, Any]], list[RecordError]]:
    """Plain JSONL rows with a unique string ``id`` and non-empty string ``required`` fields (TCS-Bench, ProofJudge).

    ``check(row, id, line)`` raises a RecordError for anything else. ``on_error="raise"`` raises the
    first RecordError (naming the id, field and line); ``"skip"`` keeps the good rows and returns the errors.

    >>> import tempfile, json
    >>> p = Path(tempfile.mkdtemp()) / "r.jsonl"
    >>> _ = p.write_text("\\n".join(json.dumps(d) for d in [{"id": "a", "s": "x"}, {"id": "a", "s": "y"}, {"id": "b"}]))
    >>> rows, errors = load_rows(p, ["s"], on_error="skip"); [r["id"] for r in rows], [e.field for e in errors]
    (['a'], ['id', 's'])
    """
    required = tuple(required)
    out, errors, seen = [], [], set()
    for i, d in enumerate(read_jsonl(path), start=1):
        rid = d.get("id")
        try:
            if not isinstance(rid, str) or not rid:
                raise RecordError(rid, "id", "missing or not a string", i)
            if rid in seen:
                raise RecordError(rid, "id", "duplicate id", i)
            for f in required:
                if not isinstance(d.get(f), str) or not d[f].strip():
                    raise RecordError(rid, f, "missing or empty", i)
            if check is not None:
                check(d, rid, i)
            seen.add(rid)
            out.append(d)
        except RecordError as e:
            if on_error != "skip":
                raise
            errors.append(e)
    return out, errors


class JsonlAppender:
    """Append-and-flush writer for resumable jobs: each row is on disk once written.

    It holds the exclusive lock of its file while open (``verifier.outputs``): a second
    process appending to the same file stops with ``OutputLocked`` before anything changes.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = acquire(self.path)
        try:
            truncate_partial_last_line(self.path)
            self._f = open(self.path, "a", encoding="utf-8")
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._lock is not None:
            release(self._lock)
            self._lock = None

    def write(self, row: dict[str, Any]) -> None:
        self._f.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()
        self._release()

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def truncate_partial_last_line(path: str | os.PathLike) -> None:
    """Drop a half-written last line left by a crash, so a resumed job appends cleanly."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        f.truncate(cut)


def write_if_changed(path: Path, records) -> None:
    """Write a JSONL atomically, and only when its content differs (a parallel worker may be reading it)."""
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    write_jsonl(tmp, records)
    if path.is_file() and path.read_bytes() == tmp.read_bytes():
        tmp.unlink()
    else:
        os.replace(tmp, path)
