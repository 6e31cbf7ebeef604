"""THE judgment record: the decision on one proof and its passes, and its one JSONL row format (section 4.4).

The runner (``verifier.runner``) writes ``Judgment.to_row()``; every reader — resume, metrics and
``eval.score``, the browser, selection, the annotation tasks, reports — reads ``Judgment.from_row(row)``.
A row::

    {"id", "verdict", "first_error_step", "accept_fraction", "status", "policy", "n",
     "n_passes", "n_accept", "n_reject", "n_unparseable", "early_stopped", "model",
     "passes": [{"index", "verdict", "first_error_step", "parse_status", "rationale", "text", "detail",
                 "finish_reason", "reasoning", "seed", "completion_tokens"}, ...],
     ["meta_grade", "meta_pass", "meta_status", "meta_rationale", "meta_detail"],   # meta-verifier grade
     ...columns}                                                                     # problem_id, template, ...

``from_row`` also reads older and smaller rows: rows written before the rationale was stored (it is
parsed from the pass text once), predictions files with only ``id`` and ``verdict`` (``eval.score``),
and the browser's meta forms (``meta: {grade, rationale}``, ``meta_comment``, per-pass grades). A bad
row is one ``RecordError`` naming the record, the field and the line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from verifier.aggregate import Aggregate
from verifier.engine import Completion
from verifier.io import iter_jsonl
from verifier.parser import parse_verification
from verifier.records import NO_STEP, MetaGrade, ParseStatus, RecordError, Verdict, VerificationOutput, parse_step

Row = dict[str, Any]


@dataclass(frozen=True)
class PassGrade:
    """A meta-verifier grade of one pass, as a row may carry it (``passes[i].meta_grade``)."""

    grade: MetaGrade | None
    rationale: str = ""


@dataclass
class Judgment:
    """The decision on one proof: aggregate fields, the per-pass outputs (``passes[i]`` is pass i), the
    meta-verifier's grade of pass ``meta_pass`` (``has_meta``: the row carries a grade, possibly null = failed)
    and the row's other columns."""

    id: str
    aggregate: Aggregate
    passes: list[VerificationOutput]  # template judges (in memory): their parsed answers
    seeds: list[int | None] = field(default_factory=list)
    completion_tokens: list[int | None] = field(default_factory=list)
    status: str = "ok"  # ok | too_long | request_failed
    early_stopped: bool = False  # fewer than n passes were run because the decision was fixed
    policy: str = "pessimistic"
    n: int = 8
    model: str = ""
    cached_passes: int = 0  # passes served by the cache (not generated in this call)
    completions: list[Completion] = field(default_factory=list, repr=False)  # raw engine output per pass
    has_meta: bool = False
    meta_grade: MetaGrade | None = None
    meta_pass: int | None = None
    meta_status: str = ""
    meta_rationale: str = ""
    meta_detail: str = ""
    pass_grades: list[PassGrade | None] = field(default_factory=list)  # per-pass grades a row carried
    columns: dict[str, Any] = field(default_factory=dict)  # the row's other fields (problem_id, template, ...)

    @property
    def verdict(self) -> Verdict | None:
        return self.aggregate.verdict

    @property
    def first_error_step(self) -> int:
        return self.aggregate.first_error_step

    @property
    def accept_fraction(self) -> float | None:
        return self.aggregate.accept_fraction

    @property
    def complete(self) -> bool:
        """False when a request failed: do not persist, re-run to finish."""
        return self.status != "request_failed"

    @property
    def tokens(self) -> int:
        return sum(t or 0 for t in self.completion_tokens)

    def to_row(self) -> Row:
        """The one JSONL row (module docstring)."""
        a = self.aggregate
        row: Row = {
            "id": self.id,
            "verdict": None if a.verdict is None else a.verdict.value,
            "first_error_step": a.first_error_step,
            "accept_fraction": a.accept_fraction,
            "status": self.status,
            "policy": self.policy,
            "n": self.n,
            "n_passes": a.n_passes,
            "n_accept": a.n_accept,
            "n_reject": a.n_reject,
            "n_unparseable": a.n_unparseable,
            "early_stopped": self.early_stopped,
            "model": self.model,
            "passes": [self._pass_row(i, p) for i, p in enumerate(self.passes)],
            **self.columns,
        }
        if self.has_meta:
            row.update({"meta_grade": None if self.meta_grade is None else self.meta_grade.value,
                        "meta_pass": self.meta_pass, "meta_status": self.meta_status,
                        "meta_rationale": self.meta_rationale, "meta_detail": self.meta_detail})
        return row

    def _pass_row(self, i: int, p: VerificationOutput) -> Row:
        row = {
            "index": i,
            "verdict": None if p.verdict is None else p.verdict.value,
            "first_error_step": p.first_error_step,
            "parse_status": p.status.value,
            "rationale": p.rationale,
            "text": p.raw_text,
            "detail": p.detail,
            "finish_reason": p.finish_reason,
            "reasoning": p.reasoning,  # the private thinking: stored, never parsed for the verdict
            "seed": self.seeds[i] if i < len(self.seeds) else None,
            "completion_tokens": self.completion_tokens[i] if i < len(self.completion_tokens) else 0,
        }
        g = self.pass_grades[i] if i < len(self.pass_grades) else None
        if g is not None:
            row.update({"meta_grade": None if g.grade is None else g.grade.value, "meta_rationale": g.rationale})
        return row

    @classmethod
    def from_row(cls, row: Any, line: int | None = None, n_steps: int | None = None,
                 passes_only: bool = False) -> "Judgment":
        """Validate and read one row (also older and smaller rows: module docstring); errors name the
        record, the field and ``line``. ``n_steps``: the proof's step count, for passes parsed from text.
        ``passes_only``: the row may lack the aggregate (selection reads only the passes; verdict None).

        >>> from verifier.aggregate import AggregationPolicy, aggregate
        >>> from verifier.parser import format_verification as f
        >>> p = parse_verification(f("invalid", 2, "step 2 is wrong"))
        >>> j = Judgment("x", aggregate([p], AggregationPolicy(n=1)), [p], [7], [5], n=1)
        >>> back = Judgment.from_row(j.to_row())
        >>> (back.verdict.value, back.first_error_step, back.passes[0].rationale, back.seeds, back.to_row() == j.to_row())
        ('invalid', 2, 'step 2 is wrong', [7], True)
        >>> Judgment.from_row({"id": "a", "verdict": "yes"}, line=4)
        Traceback (most recent call last):
        ...
        verifier.records.RecordError: line 4: record 'a', field 'verdict': unknown verdict 'yes' (expected valid or invalid)
        """
        if not isinstance(row, Mapping):
            raise RecordError(None, "<record>", f"expected a JSON object, got {type(row).__name__}", line)
        rid = row.get("id")
        if rid is None or str(rid).strip() == "":
            raise RecordError(None, "id", "missing", line)
        rid = str(rid)
        try:
            return cls._read(rid, row, n_steps, passes_only)
        except RecordError as e:
            if e.line is None and line is not None:
                raise RecordError(e.record_id, e.field, e.message, line) from None
            raise

    @classmethod
    def _read(cls, rid: str, row: Mapping[str, Any], n_steps: int | None, passes_only: bool) -> "Judgment":
        if "verdict" not in row and not passes_only:
            raise RecordError(rid, "verdict", "missing (use null for an unparseable output)")
        verdict = None if row.get("verdict") is None else Verdict.parse(row["verdict"], rid)
        step = parse_step(row.get("first_error_step", NO_STEP), rid, "first_error_step")
        raw = row.get("passes") or []
        if not isinstance(raw, list):
            raise RecordError(rid, "passes", f"expected a list, got {type(raw).__name__}")
        read = sorted((_read_pass(p, i, rid, n_steps) for i, p in enumerate(raw)), key=lambda t: t[0])
        if [t[0] for t in read] != list(range(len(read))):
            raise RecordError(rid, "passes", f"pass indices are not 0..{len(read) - 1}: {[t[0] for t in read]}")
        passes = [t[1] for t in read]
        af = row.get("accept_fraction")
        if af is None:
            af = sum(p.accepts for p in passes) / len(passes) if passes else None
        elif isinstance(af, bool) or not isinstance(af, (int, float)) or not 0 <= af <= 1:
            raise RecordError(rid, "accept_fraction", f"expected a number in [0, 1], got {af!r}")
        agg = Aggregate(
            verdict=verdict, first_error_step=step, accept_fraction=None if af is None else float(af),
            n_passes=_int(row, "n_passes", len(passes), rid),
            n_accept=_int(row, "n_accept", sum(p.accepts for p in passes), rid),
            n_reject=_int(row, "n_reject", sum(p.ok and not p.accepts for p in passes), rid),
            n_unparseable=_int(row, "n_unparseable", sum(not p.ok for p in passes), rid),
        )
        grade, comment, has_meta = _grade(row, rid, "")
        meta_pass = row.get("meta_pass")
        if meta_pass is not None and (isinstance(meta_pass, bool) or not isinstance(meta_pass, int)):
            raise RecordError(rid, "meta_pass", f"expected a pass index, got {meta_pass!r}")
        grades = [t[4] for t in read]
        return cls(
            id=rid, aggregate=agg, passes=passes, seeds=[t[2] for t in read], completion_tokens=[t[3] for t in read],
            status=_str(row.get("status"), rid, "status") or "ok", early_stopped=bool(row.get("early_stopped", False)),
            policy=_str(row.get("policy"), rid, "policy") or "pessimistic", n=_int(row, "n", len(passes), rid),
            model=_str(row.get("model"), rid, "model"), has_meta=has_meta, meta_grade=grade, meta_pass=meta_pass,
            meta_status=_str(row.get("meta_status"), rid, "meta_status"), meta_rationale=comment,
            meta_detail=_str(row.get("meta_detail"), rid, "meta_detail"),
            pass_grades=grades if any(g is not None for g in grades) else [],
            columns={k: v for k, v in row.items() if k not in ROW_FIELDS},
        )


def load_judgments(path: str | os.PathLike, passes_only: bool = False) -> list[Judgment]:
    """The judgment records of a judgments JSONL, in file order; a bad line is one ``RecordError`` (line, field)."""
    out = []
    for line, row in iter_jsonl(path):
        if isinstance(row, RecordError):  # a line that is not JSON
            raise row
        out.append(Judgment.from_row(row, line, passes_only=passes_only))
    return out


ROW_FIELDS = frozenset({"id", "verdict", "first_error_step", "accept_fraction", "status", "policy", "n", "n_passes",
                        "n_accept", "n_reject", "n_unparseable", "early_stopped", "model", "passes", "meta_grade",
                        "meta_pass", "meta_status", "meta_rationale", "meta_detail", "meta_comment", "meta"})


def _str(v: Any, rid: str, fld: str) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    raise RecordError(rid, fld, f"expected a string, got {type(v).__name__}")


def _int(obj: Mapping[str, Any], key: str, default: int, rid: str, prefix: str = "") -> int:
    v = obj.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise RecordError(rid, prefix + key, f"expected an integer, got {v!r}")
    return v


def _grade(obj: Mapping[str, Any], rid: str, prefix: str) -> tuple[MetaGrade | None, str, bool]:
    """(grade, rationale, present) from ``meta_grade`` + ``meta_rationale``/``meta_comment``, or a ``meta`` object."""
    grade = obj.get("meta_grade")
    comment = obj.get("meta_rationale", obj.get("meta_comment"))
    gfield = f"{prefix}meta_grade"
    meta = obj.get("meta")
    present = "meta_grade" in obj
    if isinstance(meta, Mapping):
        present = True
        if grade is None:
            grade = meta.get("grade", meta.get("meta_grade"))
            gfield = f"{prefix}meta.grade"
        if comment is None:
            comment = meta.get("rationale", meta.get("comment"))
    g = None if grade in (None, "") else MetaGrade.parse(grade, rid, gfield)
    return g, _str(comment, rid, f"{prefix}meta_rationale"), present


def _read_pass(p: Any, i: int, rid: str, n_steps: int | None
               ) -> tuple[int, VerificationOutput, int | None, int | None, PassGrade | None]:
    """(index, output, seed, completion tokens, grade) of one stored pass; what is missing is parsed from its text."""
    pre = f"passes[{i}]."
    if not isinstance(p, Mapping):
        raise RecordError(rid, f"passes[{i}]", f"expected an object, got {type(p).__name__}")
    index = p.get("index", i)
    if isinstance(index, bool) or not isinstance(index, int):
        raise RecordError(rid, pre + "index", f"expected an integer, got {index!r}")
    text = _str(p.get("text"), rid, pre + "text")
    stored = p.get("rationale")
    needs_parse = text and (stored is None or "parse_status" not in p or "verdict" not in p
                            or "first_error_step" not in p)
    parsed = parse_verification(text, n_steps=n_steps) if needs_parse else None  # rows without the stored fields
    if "verdict" in p:
        verdict = None if p["verdict"] is None else Verdict.parse(p["verdict"], rid, pre + "verdict")
    else:
        verdict = parsed.verdict if parsed is not None else None
    if "first_error_step" in p:
        step = parse_step(p["first_error_step"], rid, pre + "first_error_step")
    else:
        step = parsed.first_error_step if parsed is not None else NO_STEP
    st = p.get("parse_status")
    if st is None:
        status = parsed.status if parsed is not None else (ParseStatus.OK if verdict is not None
                                                           else ParseStatus.MISSING_FIELD)
    else:
        try:
            status = ParseStatus(st)
        except ValueError:
            raise RecordError(rid, pre + "parse_status", f"unknown status {st!r}") from None
    if status.ok and verdict is None:
        status = ParseStatus.MISSING_FIELD
    rationale = _str(stored, rid, pre + "rationale") if stored is not None else (
        parsed.rationale if parsed is not None else "")
    detail = _str(p.get("detail"), rid, pre + "detail") or (parsed.detail if parsed is not None else "")
    out = VerificationOutput(status, verdict, step, rationale, text, detail,
                             reasoning=_str(p.get("reasoning"), rid, pre + "reasoning"),
                             finish_reason=p.get("finish_reason"))
    seed, toks = p.get("seed"), p.get("completion_tokens")
    grade, comment, present = _grade(p, rid, pre)
    return (index, out, seed if isinstance(seed, int) else None, toks if isinstance(toks, int) else None,
            PassGrade(grade, comment) if present else None)
