"""Record types shared by every module (AdvancedMathBench appendix C).

A record flows: ``ProofTrajectory`` (with its ``Annotation``) -> prompt ->
completion -> ``VerificationOutput`` -> reward / aggregate -> metric.

Step indices are always zero-based indices into ``proof_steps`` (appendix C.4).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Iterable

from verifier.errors import UserError

NO_STEP = -1  # "no error" in every step field (appendix C.4)


class RecordError(UserError, ValueError):
    """A malformed record; names the record id and the offending field."""

    def __init__(self, record_id: str | None, field_name: str, message: str, line: int | None = None):
        self.record_id = record_id
        self.field = field_name
        self.message = message
        self.line = line
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"{where}record {record_id!r}, field {field_name!r}: {message}")


class Verdict(str, enum.Enum):
    """Binary validity judgment of a proof (section 3.3)."""

    VALID = "valid"
    INVALID = "invalid"

    @classmethod
    def parse(cls, value: Any, record_id: str | None = None, field_name: str = "verdict") -> "Verdict":
        """Strictly parse ``valid``/``invalid`` (case-insensitive); anything else is a RecordError.

        >>> Verdict.parse("Valid")
        <Verdict.VALID: 'valid'>
        >>> Verdict.parse("maybe", "p1")
        Traceback (most recent call last):
        ...
        verifier.records.RecordError: record 'p1', field 'verdict': unknown verdict 'maybe' (expected valid or invalid)
        """
        if isinstance(value, Verdict):
            return value
        if isinstance(value, str) and value.strip().lower() in ("valid", "invalid"):
            return cls(value.strip().lower())
        raise RecordError(record_id, field_name, f"unknown verdict {value!r} (expected valid or invalid)")


class MetaGrade(str, enum.Enum):
    """Four-level meta-verification grade and its RL reward (sections 3.3, 4.3)."""

    EXACT_MATCH = "EXACT_MATCH"
    BASIC_MATCH = "BASIC_MATCH"
    POOR_MATCH = "POOR_MATCH"
    WRONG_POLARITY = "WRONG_POLARITY"

    @property
    def reward(self) -> float:
        """Reward of section 4.3.

        >>> [g.reward for g in MetaGrade]
        [1.0, 0.5, 0.25, 0.0]
        """
        return _GRADE_REWARD[self]

    @classmethod
    def parse(cls, value: Any, record_id: str | None = None, field_name: str = "meta_grade") -> "MetaGrade":
        """>>> MetaGrade.parse("basic_match")
        <MetaGrade.BASIC_MATCH: 'BASIC_MATCH'>
        """
        if isinstance(value, MetaGrade):
            return value
        if isinstance(value, str):
            key = value.strip().upper().replace(" ", "_").replace("-", "_")
            if key in cls.__members__:
                return cls[key]
        raise RecordError(record_id, field_name, f"unknown meta grade {value!r} (expected one of {', '.join(cls.__members__)})")

    def __ge__(self, other: "MetaGrade") -> bool:  # type: ignore[override]
        return self.reward >= other.reward

    def __gt__(self, other: "MetaGrade") -> bool:  # type: ignore[override]
        return self.reward > other.reward

    def __le__(self, other: "MetaGrade") -> bool:  # type: ignore[override]
        return self.reward <= other.reward

    def __lt__(self, other: "MetaGrade") -> bool:  # type: ignore[override]
        return self.reward < other.reward


_GRADE_REWARD = {
    MetaGrade.EXACT_MATCH: 1.0,
    MetaGrade.BASIC_MATCH: 0.5,
    MetaGrade.POOR_MATCH: 0.25,
    MetaGrade.WRONG_POLARITY: 0.0,
}


class ParseStatus(str, enum.Enum):
    """Explicit outcome of parsing one model output; only OK carries a verdict."""

    OK = "ok"
    EMPTY = "empty"
    NO_ANSWER_BLOCK = "no_answer_block"
    MISSING_FIELD = "missing_field"
    BAD_VALUE = "bad_value"
    AMBIGUOUS = "ambiguous"
    INCONSISTENT = "inconsistent"
    STEP_OUT_OF_RANGE = "step_out_of_range"
    TOO_LONG = "too_long"  # prompt longer than the model context (set by the engine)
    TRUNCATED = "truncated"  # generation hit its max_tokens budget (finish_reason "length"): never a verdict
    UNCLOSED_THINKING = "unclosed_thinking"  # output ended inside <think>: a block there is a draft
    REQUEST_FAILED = "request_failed"  # engine error after retries

    @property
    def ok(self) -> bool:
        return self is ParseStatus.OK


def problem_id_of(problem: str) -> str:
    """The problem identity of records without a ``problem_id``: a hash of the normalised problem text.

    Records of ProcessBench and OPC that share a problem (after Unicode NFKC and whitespace
    collapsing) share this id, so held-out splits (``data_pipeline.splits``) keep a problem
    on one side and the bootstrap (``eval.stats``) clusters by problem (gsm8k: 400 proofs,
    375 problems).

    >>> problem_id_of("Find  x. ") == problem_id_of("Find x.") != problem_id_of("Find y.")
    True
    """
    norm = " ".join(unicodedata.normalize("NFKC", problem).split())
    return "prob-" + hashlib.sha256(norm.encode("utf-8")).hexdigest()[:16]


def parse_step(value: Any, record_id: str | None, field_name: str) -> int:
    """Parse one step index; ``-1``/None/"" mean no step.

    >>> parse_step("3", "p", "first_fatal_error_step"), parse_step(None, "p", "x"), parse_step(-1, "p", "x")
    (3, -1, -1)
    """
    if value is None or (isinstance(value, str) and value.strip() in ("", "-1", "none", "None")):
        return NO_STEP
    if isinstance(value, bool):
        raise RecordError(record_id, field_name, f"expected a step index, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise RecordError(record_id, field_name, f"expected a step index, got {value!r}") from None
    if not isinstance(value, int):
        raise RecordError(record_id, field_name, f"expected a step index, got {value!r}")
    if value < NO_STEP:
        raise RecordError(record_id, field_name, f"step index {value} is negative (use -1 for none)")
    return value


def parse_step_list(value: Any, record_id: str | None, field_name: str) -> list[int]:
    """Parse recoverable steps in the annotators' forms: ``-1``, a list, or ``"2,5"``.

    >>> parse_step_list("2, 5", "p", "f"), parse_step_list(-1, "p", "f"), parse_step_list([3, "1"], "p", "f")
    ([2, 5], [], [1, 3])
    """
    if value is None:
        return []
    if isinstance(value, str):
        parts = [p for p in value.replace(";", ",").split(",") if p.strip()]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        parts = [value]
    steps = sorted({parse_step(p, record_id, field_name) for p in parts} - {NO_STEP})
    return steps


@dataclass(frozen=True)
class Annotation:
    """Expert annotation of one proof trajectory (appendix C.4)."""

    reviewer_comment: str = ""
    first_fatal_error_step: int = NO_STEP
    recoverable_error_steps: tuple[int, ...] = ()
    remark: str = ""
    report_error_case: bool = False
    correction: str = ""  # expert correction suggestions (section 3.3 / 4.2), optional
    # Invalid, but the fatal step was not located (e.g. OPC's binary human verdicts).
    fatal_step_unknown: bool = False

    @property
    def is_valid(self) -> bool:
        """Gold polarity (appendix C.5): valid iff there is no fatal error."""
        return self.first_fatal_error_step == NO_STEP and not self.fatal_step_unknown

    @property
    def polarity(self) -> Verdict:
        return Verdict.VALID if self.is_valid else Verdict.INVALID

    @property
    def fully_correct(self) -> bool:
        """No fatal and no recoverable error (appendix C.5)."""
        return self.is_valid and not self.recoverable_error_steps

    @classmethod
    def from_dict(cls, d: dict[str, Any], record_id: str | None, n_steps: int | None = None) -> "Annotation":
        """Validate an annotation dict; errors name the record and the field."""
        if not isinstance(d, dict):
            raise RecordError(record_id, "annotation", f"expected an object, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise RecordError(record_id, f"annotation.{sorted(unknown)[0]}", "unknown field")
        fatal = parse_step(d.get("first_fatal_error_step", NO_STEP), record_id, "annotation.first_fatal_error_step")
        rec = parse_step_list(d.get("recoverable_error_steps"), record_id, "annotation.recoverable_error_steps")
        if n_steps is not None:
            if fatal >= n_steps:
                raise RecordError(record_id, "annotation.first_fatal_error_step",
                                  f"step {fatal} is outside the proof (steps 0..{n_steps - 1})")
            for s in rec:
                if s >= n_steps:
                    raise RecordError(record_id, "annotation.recoverable_error_steps",
                                      f"step {s} is outside the proof (steps 0..{n_steps - 1})")
        if fatal != NO_STEP and any(s >= fatal for s in rec):
            raise RecordError(record_id, "annotation.recoverable_error_steps",
                              f"recoverable steps {rec} must come before the first fatal step {fatal} (appendix C.4)")
        report = d.get("report_error_case", False)
        if isinstance(report, str):
            if report.strip().lower() in ("true", "1", "yes", "y"):
                report = True
            elif report.strip().lower() in ("false", "0", "no", "n", ""):
                report = False
        if not isinstance(report, bool):
            raise RecordError(record_id, "annotation.report_error_case", f"expected true/false, got {report!r}")
        remark = _str(d.get("remark"), record_id, "annotation.remark")
        if report and not remark.strip():
            raise RecordError(record_id, "annotation.remark", "report_error_case is set but the remark is empty (appendix C.4)")
        unknown_step = d.get("fatal_step_unknown", False)
        if not isinstance(unknown_step, bool):
            raise RecordError(record_id, "annotation.fatal_step_unknown", f"expected true/false, got {unknown_step!r}")
        if unknown_step and fatal != NO_STEP:
            raise RecordError(record_id, "annotation.fatal_step_unknown", "set together with a first fatal error step")
        return cls(
            fatal_step_unknown=unknown_step,
            reviewer_comment=_str(d.get("reviewer_comment"), record_id, "annotation.reviewer_comment"),
            first_fatal_error_step=fatal,
            recoverable_error_steps=tuple(rec),
            remark=remark,
            report_error_case=report,
            correction=_str(d.get("correction"), record_id, "annotation.correction"),
        )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["recoverable_error_steps"] = list(self.recoverable_error_steps)
        return d


def _str(value: Any, record_id: str | None, field_name: str, required: bool = False) -> str:
    if value is None:
        if required:
            raise RecordError(record_id, field_name, "missing")
        return ""
    if not isinstance(value, str):
        raise RecordError(record_id, field_name, f"expected a string, got {type(value).__name__}")
    if required and not value.strip():
        raise RecordError(record_id, field_name, "missing (empty)")
    return value


@dataclass(frozen=True)
class ProofTrajectory:
    """One model-generated proof of one problem (sections 3.1, 3.3), optionally annotated."""

    id: str
    problem_id: str
    problem: str
    proof_steps: tuple[str, ...]
    reference_solution: str = ""
    subject: str = ""
    split: str = ""
    source: str = ""
    generator: str = ""
    annotation: Annotation | None = None
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def proof(self) -> str:
        """The proof as one text with zero-based step markers, as models see it."""
        return "\n\n".join(f"Step {i}: {s}" for i, s in enumerate(self.proof_steps))

    @property
    def gold_verdict(self) -> Verdict | None:
        return None if self.annotation is None else self.annotation.polarity

    @classmethod
    def from_dict(cls, d: dict[str, Any], line: int | None = None) -> "ProofTrajectory":
        """Validate one JSONL record (the layout users write; annotation nested under ``annotation``)."""
        if not isinstance(d, dict):
            raise RecordError(None, "<record>", f"expected a JSON object, got {type(d).__name__}", line)
        rid = d.get("id")
        try:
            if rid is None or (isinstance(rid, str) and not rid.strip()):
                raise RecordError(None, "id", "missing")
            if not isinstance(rid, (str, int)):
                raise RecordError(None, "id", f"expected a string, got {type(rid).__name__}")
            rid = str(rid)
            known = {f.name for f in dataclasses.fields(cls)}
            unknown = set(d) - known
            if unknown:
                raise RecordError(rid, sorted(unknown)[0], "unknown field")
            problem = _str(d.get("problem"), rid, "problem", required=True)
            steps = d.get("proof_steps")
            if steps is None:
                raise RecordError(rid, "proof_steps", "missing")
            if not isinstance(steps, (list, tuple)) or not steps:
                raise RecordError(rid, "proof_steps", "expected a non-empty list of strings")
            for i, s in enumerate(steps):
                if not isinstance(s, str):
                    raise RecordError(rid, f"proof_steps[{i}]", f"expected a string, got {type(s).__name__}")
            pid = d.get("problem_id")
            if pid is None or str(pid).strip() == "":
                # the id every leak check uses: a hash of the normalised problem text (counted by load_trajectories)
                pid = problem_id_of(problem)
            ann = d.get("annotation")
            annotation = None if ann is None else Annotation.from_dict(ann, rid, n_steps=len(steps))
            meta = d.get("meta") or {}
            if not isinstance(meta, dict):
                raise RecordError(rid, "meta", "expected an object")
            return cls(
                id=rid,
                problem_id=str(pid),
                problem=problem,
                proof_steps=tuple(steps),
                reference_solution=_str(d.get("reference_solution"), rid, "reference_solution"),
                subject=_str(d.get("subject"), rid, "subject"),
                split=_str(d.get("split"), rid, "split"),
                source=_str(d.get("source"), rid, "source"),
                generator=_str(d.get("generator"), rid, "generator"),
                annotation=annotation,
                meta=meta,
            )
        except RecordError as e:
            if e.line is None and line is not None:
                raise RecordError(e.record_id, e.field, e.message, line) from None
            raise

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "problem_id": self.problem_id,
            "problem": self.problem,
            "proof_steps": list(self.proof_steps),
        }
        for k in ("reference_solution", "subject", "split", "source", "generator"):
            v = getattr(self, k)
            if v:
                d[k] = v
        if self.annotation is not None:
            d["annotation"] = self.annotation.to_dict()
        if self.meta:
            d["meta"] = self.meta
        return d


@dataclass(frozen=True)
class VerificationOutput:
    """A parsed verifier output (appendix B.2): verdict, rationale, first error step (-1 = none)."""

    status: ParseStatus
    verdict: Verdict | None = None
    first_error_step: int = NO_STEP
    rationale: str = ""
    raw_text: str = ""
    detail: str = ""  # why parsing failed, for reports
    reasoning: str = ""  # the private thinking (server-separated or <think> in the text); never parsed
    finish_reason: str | None = None  # the engine's, kept on every pass ("length": truncated)

    @property
    def ok(self) -> bool:
        return self.status is ParseStatus.OK

    @property
    def accepts(self) -> bool:
        """True only for a parsed ``valid`` verdict; a parse failure never accepts."""
        return self.status is ParseStatus.OK and self.verdict is Verdict.VALID

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": None if self.verdict is None else self.verdict.value,
            "first_error_step": self.first_error_step,
            "rationale": self.rationale,
            "parse_status": self.status.value,
            "detail": self.detail,
            "text": self.raw_text,
        }


@dataclass(frozen=True)
class MetaVerification:
    """A parsed meta-verifier output (appendix B.3): the four-level grade and its explanation."""

    status: ParseStatus
    grade: MetaGrade | None = None
    rationale: str = ""
    raw_text: str = ""
    detail: str = ""
    reasoning: str = ""
    finish_reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is ParseStatus.OK

    @property
    def reward(self) -> float | None:
        return None if self.grade is None else self.grade.reward


def check_unique_ids(records: Iterable[ProofTrajectory]) -> None:
    """Raise a RecordError naming the first duplicated id."""
    seen: set[str] = set()
    for r in records:
        if r.id in seen:
            raise RecordError(r.id, "id", "duplicate id")
        seen.add(r.id)
