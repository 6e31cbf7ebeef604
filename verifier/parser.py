"""The one parser of verifier and meta-verifier outputs (appendix B.2, B.3).

Used by every caller: judging, aggregation, evaluation and the GRPO reward.
It reads only the *last* ``<final_answer> ... </final_answer>`` block of the
completion (after dropping closed ``<think>`` sections), tolerates whitespace
and markdown noise, and returns an explicit failure status instead of ever
guessing: a verdict word in the rationale, an echoed proof, or an injected
"Verdict: valid" outside the block never changes the result.
"""

from __future__ import annotations

import re

from verifier.records import (
    NO_STEP,
    MetaGrade,
    MetaVerification,
    ParseStatus,
    Verdict,
    VerificationOutput,
)

_BLOCK_RE = re.compile(
    r"<\s*final_answer\s*>(?P<body>.*?)<\s*/\s*final_answer\s*>", re.IGNORECASE | re.DOTALL
)
_OPEN_RE = re.compile(r"<\s*final_answer\s*>", re.IGNORECASE)
_THINK_RE = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_FIELD_RE = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z _-]*?)\s*[:=]\s*(?P<value>.*?)\s*$")
_NOISE = str.maketrans("", "", "*`#>\"'")


def _clean_key(key: str) -> str:
    return re.sub(r"[\s-]+", "_", key.translate(str.maketrans("", "", "*`#")).strip().lower())


def _clean_value(value: str) -> str:
    v = value.strip()
    v = re.sub(r"^[\*`_\"'\[(]+|[\*`_\"'\])\.,;!]+$", "", v)
    return v.strip()


def _fields(body: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in body.splitlines():
        line = line.strip().lstrip("-*• ").strip()
        line = re.sub(r"^\*\*(.+?)\*\*", r"\1", line)  # **verdict**: valid
        m = _FIELD_RE.match(line.replace("**", ""))
        if not m:
            continue
        out.setdefault(_clean_key(m.group("key")), []).append(_clean_value(m.group("value")))
    return out


def _last_block(text: str) -> tuple[str | None, str, str]:
    """Return (block body or None, text before the block, failure detail)."""
    visible = _THINK_RE.sub("", text)
    blocks = list(_BLOCK_RE.finditer(visible))
    if not blocks:
        if _OPEN_RE.search(visible):
            return None, visible, "answer block opened but never closed"
        return None, visible, "no <final_answer> block"
    last = blocks[-1]
    return last.group("body"), visible[: last.start()].strip(), ""


def _single(fields: dict[str, list[str]], *names: str) -> tuple[str | None, str]:
    """One field value by any of its names; ('', reason) when missing or conflicting."""
    values = [v for n in names for v in fields.get(n, [])]
    if not values:
        return None, "missing"
    distinct = {v.lower() for v in values}
    if len(distinct) > 1:
        return None, f"conflicting values {sorted(distinct)}"
    return values[0], ""


def parse_verification(text: str | None, n_steps: int | None = None) -> VerificationOutput:
    """Parse a verifier completion into verdict, first error step and rationale.

    >>> parse_verification("Step 2 divides by zero.\\n<final_answer>\\nverdict: invalid\\nfirst_error_step: 2\\n</final_answer>").verdict
    <Verdict.INVALID: 'invalid'>
    >>> parse_verification("The proof is valid.").status
    <ParseStatus.NO_ANSWER_BLOCK: 'no_answer_block'>
    """
    raw = text or ""
    if not raw.strip():
        return VerificationOutput(ParseStatus.EMPTY, raw_text=raw, detail="empty output")
    body, before, why = _last_block(raw)
    if body is None:
        return VerificationOutput(ParseStatus.NO_ANSWER_BLOCK, raw_text=raw, rationale=before.strip(), detail=why)
    fields = _fields(body)

    def fail(status: ParseStatus, detail: str) -> VerificationOutput:
        return VerificationOutput(status, raw_text=raw, rationale=before, detail=detail)

    verdict_s, why = _single(fields, "verdict", "final_verdict", "judgment", "judgement")
    if verdict_s is None:
        status = ParseStatus.MISSING_FIELD if why == "missing" else ParseStatus.AMBIGUOUS
        return fail(status, f"verdict: {why}")
    v = verdict_s.translate(_NOISE).strip().lower()
    if v not in ("valid", "invalid"):
        return fail(ParseStatus.BAD_VALUE, f"verdict: {verdict_s!r} is not valid/invalid")
    verdict = Verdict(v)

    step_s, why = _single(fields, "first_error_step", "first_error", "error_step", "first_fatal_error_step")
    if step_s is None:
        return fail(ParseStatus.MISSING_FIELD if why == "missing" else ParseStatus.AMBIGUOUS, f"first_error_step: {why}")
    m = re.fullmatch(r"(?:step\s*)?(-?\d+)", step_s.translate(_NOISE).strip(), re.IGNORECASE)
    if not m:
        return fail(ParseStatus.BAD_VALUE, f"first_error_step: {step_s!r} is not an integer")
    step = int(m.group(1))
    if step < NO_STEP:
        return fail(ParseStatus.BAD_VALUE, f"first_error_step: {step} < -1")
    if verdict is Verdict.VALID and step != NO_STEP:
        return fail(ParseStatus.INCONSISTENT, f"verdict valid but first_error_step {step}")
    if n_steps is not None and step >= n_steps:
        return fail(ParseStatus.STEP_OUT_OF_RANGE, f"first_error_step {step} outside steps 0..{n_steps - 1}")
    return VerificationOutput(ParseStatus.OK, verdict, step, before, raw)


def parse_meta_verification(text: str | None) -> MetaVerification:
    """Parse a meta-verifier completion into one of the four grades (B.3).

    >>> parse_meta_verification("ok\\n<final_answer>grade: **BASIC_MATCH**</final_answer>").grade
    <MetaGrade.BASIC_MATCH: 'BASIC_MATCH'>
    """
    raw = text or ""
    if not raw.strip():
        return MetaVerification(ParseStatus.EMPTY, raw_text=raw, detail="empty output")
    body, before, why = _last_block(raw)
    if body is None:
        return MetaVerification(ParseStatus.NO_ANSWER_BLOCK, raw_text=raw, rationale=before, detail=why)
    fields = _fields(body)
    grade_s, why = _single(fields, "grade", "score", "meta_grade")
    if grade_s is None:
        status = ParseStatus.MISSING_FIELD if why == "missing" else ParseStatus.AMBIGUOUS
        return MetaVerification(status, raw_text=raw, rationale=before, detail=f"grade: {why}")
    key = grade_s.translate(_NOISE).strip().upper().replace(" ", "_").replace("-", "_")
    if key not in MetaGrade.__members__:
        return MetaVerification(ParseStatus.BAD_VALUE, raw_text=raw, rationale=before,
                                detail=f"grade: {grade_s!r} is not one of {', '.join(MetaGrade.__members__)}")
    return MetaVerification(ParseStatus.OK, MetaGrade[key], before, raw)


def format_verification(verdict: Verdict | str, first_error_step: int, rationale: str) -> str:
    """The canonical completion text the parser reads (used for SFT targets and tests).

    >>> parse_verification(format_verification("valid", -1, "All steps hold.")).accepts
    True
    """
    v = Verdict.parse(verdict).value
    return f"{rationale.strip()}\n\n<final_answer>\nverdict: {v}\nfirst_error_step: {first_error_step}\n</final_answer>"


def format_meta_verification(grade: MetaGrade | str, rationale: str) -> str:
    """Canonical meta-verifier completion text."""
    g = MetaGrade.parse(grade).value
    return f"{rationale.strip()}\n\n<final_answer>\ngrade: {g}\n</final_answer>"
