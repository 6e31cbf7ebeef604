"""The one parser of verifier and meta-verifier outputs (appendix B.2, B.3).

Used by every caller: judging, aggregation, evaluation and the GRPO reward.
It reads only the *last* ``<final_answer> ... </final_answer>`` block of the
completion's answer, tolerates whitespace and markdown noise, and returns an
explicit failure status instead of ever guessing: a verdict word in the
rationale, an echoed proof, or an injected "Verdict: valid" outside the block
never changes the result.

Thinking (reasoning models, sections 3.3 and 5.1) is never the answer: closed
``<think>...</think>`` sections are the private reasoning; a bare ``</think>``
(thinking opened by the chat template in the prompt) ends the thinking, and only
what follows it is read; an unclosed ``<think>`` gives ``unclosed_thinking``, so a
block drafted mid-thought is never a verdict. ``parse_completion`` turns an engine
completion into a pass: ``finish_reason == "length"`` is ``truncated`` whatever
the text holds, and server-separated reasoning (``reasoning_content``) is kept,
never parsed. A prover's completion loses its reasoning the same way before it is split into proof
steps (``without_reasoning``; ``reasoning_format``: ``think``, ``think_opened``, ``none``).
``finish_reason_of`` gives token ids (GRPO's completions) the same ``finish_reason``,
so the reward and evaluation decide a completion's status in one place.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
_THINK_PAIR_RE = re.compile(r"<\s*think\s*>(?P<body>.*?)<\s*/\s*think\s*>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN_RE = re.compile(r"<\s*think\s*>", re.IGNORECASE)
_THINK_CLOSE_RE = re.compile(r"<\s*/\s*think\s*>", re.IGNORECASE)
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


def split_thinking(text: str, opened_thinking: bool = False) -> tuple[str | None, str]:
    """``(answer text, reasoning)``; the answer is None when the thinking never closed.

    Closed ``<think>...</think>`` sections are reasoning; a bare ``</think>`` ends thinking
    opened earlier (by the chat template, in the prompt) and only what follows the last one
    is the answer. ``opened_thinking``: the prompt is known to end inside ``<think>``, so a
    completion without ``</think>`` is all thinking.

    >>> split_thinking("<think>hm</think> answer")
    (' answer', 'hm')
    >>> split_thinking("drafts</think> answer")
    (' answer', 'drafts')
    >>> split_thinking("<think>cut off mid-thought")
    (None, 'cut off mid-thought')
    >>> split_thinking("no tags", opened_thinking=True)
    (None, 'no tags')
    """
    t = ("<think>" if opened_thinking else "") + (text or "")
    reasoning: list[str] = []

    def _pair(m: re.Match) -> str:
        reasoning.append(m.group("body").strip())
        return ""

    visible = _THINK_PAIR_RE.sub(_pair, t)
    closes = list(_THINK_CLOSE_RE.finditer(visible))
    if closes:  # a bare </think>: everything before it was thinking opened earlier (or in the prompt)
        reasoning.insert(0, _THINK_OPEN_RE.sub("", visible[: closes[-1].start()]).strip())
        visible = visible[closes[-1].end():]
    opened = _THINK_OPEN_RE.search(visible)
    if opened:
        reasoning.append(visible[opened.end():].strip())
        return None, "\n\n".join(r for r in reasoning if r)
    return visible, "\n\n".join(r for r in reasoning if r)


REASONING_FORMATS = ("think", "think_opened", "none")  # a prover's reasoning format (``without_reasoning``)


def without_reasoning(text: str, reasoning_format: str = "think", reasoning: str = "") -> str | None:
    """A thinking prover's answer with its reasoning removed: the proof a verifier judges (sections 4.4,
    5.1); None when the thinking never ended (e.g. cut by max tokens): there is no proof to judge.

    ``reasoning_format``: ``think`` (the default: closed ``<think>...</think>`` sections and everything
    before a bare ``</think>`` are reasoning, as ``split_thinking`` reads them; a text without tags is
    unchanged), ``think_opened`` (the chat template opens ``<think>`` in the prompt: a completion without
    ``</think>`` is all thinking), ``none`` (a non-thinking prover: the text unchanged). ``reasoning``: the
    server-separated thinking (``reasoning_content``); an empty answer beside it never left the thinking.

    >>> without_reasoning("<think>try x = 2</think>Step 0: x = 1")
    'Step 0: x = 1'
    >>> without_reasoning("<think>cut mid-thought") is None, without_reasoning("<think>cut", "none")
    (True, '<think>cut')
    >>> without_reasoning("Step 0: x = 1"), without_reasoning("Step 0: x = 1", "think_opened") is None
    ('Step 0: x = 1', True)
    >>> without_reasoning("", reasoning="cut mid-thought") is None
    True
    """
    if reasoning_format not in REASONING_FORMATS:
        raise ValueError(f"reasoning_format: expected one of {', '.join(REASONING_FORMATS)}, got {reasoning_format!r}")
    text = text or ""
    if reasoning_format == "none":
        return text
    answer, _ = split_thinking(text, opened_thinking=reasoning_format == "think_opened")
    if answer is None or (not answer.strip() and (reasoning or "").strip()):
        return None
    return answer


def _last_block(text: str, opened_thinking: bool = False) -> tuple[str | None, str, str, ParseStatus]:
    """Return (block body or None, text before the block, failure detail, failure status)."""
    visible, _ = split_thinking(text, opened_thinking)
    if visible is None:
        return None, "", "output ended inside <think> (a block there is a draft, not the answer)", \
            ParseStatus.UNCLOSED_THINKING
    blocks = list(_BLOCK_RE.finditer(visible))
    if not blocks:
        if _OPEN_RE.search(visible):
            return None, visible, "answer block opened but never closed", ParseStatus.NO_ANSWER_BLOCK
        return None, visible, "no <final_answer> block", ParseStatus.NO_ANSWER_BLOCK
    last = blocks[-1]
    return last.group("body"), visible[: last.start()].strip(), "", ParseStatus.OK


def _single(fields: dict[str, list[str]], *names: str) -> tuple[str | None, str]:
    """One field value by any of its names; ('', reason) when missing or conflicting."""
    values = [v for n in names for v in fields.get(n, [])]
    if not values:
        return None, "missing"
    distinct = {v.lower() for v in values}
    if len(distinct) > 1:
        return None, f"conflicting values {sorted(distinct)}"
    return values[0], ""


def parse_verification(text: str | None, n_steps: int | None = None, opened_thinking: bool = False
                       ) -> VerificationOutput:
    """Parse a verifier completion into verdict, first error step and rationale.

    >>> parse_verification("Step 2 divides by zero.\\n<final_answer>\\nverdict: invalid\\nfirst_error_step: 2\\n</final_answer>").verdict
    <Verdict.INVALID: 'invalid'>
    >>> parse_verification("The proof is valid.").status
    <ParseStatus.NO_ANSWER_BLOCK: 'no_answer_block'>
    """
    raw = text or ""
    if not raw.strip():
        return VerificationOutput(ParseStatus.EMPTY, raw_text=raw, detail="empty output")
    reasoning = split_thinking(raw, opened_thinking)[1]
    body, before, why, failed = _last_block(raw, opened_thinking)
    if body is None:
        return VerificationOutput(failed, raw_text=raw, rationale=before.strip(), detail=why, reasoning=reasoning)
    fields = _fields(body)

    def fail(status: ParseStatus, detail: str) -> VerificationOutput:
        return VerificationOutput(status, raw_text=raw, rationale=before, detail=detail, reasoning=reasoning)

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
    return VerificationOutput(ParseStatus.OK, verdict, step, before, raw, reasoning=reasoning)


def parse_meta_verification(text: str | None, opened_thinking: bool = False) -> MetaVerification:
    """Parse a meta-verifier completion into one of the four grades (B.3).

    >>> parse_meta_verification("ok\\n<final_answer>grade: **BASIC_MATCH**</final_answer>").grade
    <MetaGrade.BASIC_MATCH: 'BASIC_MATCH'>
    """
    raw = text or ""
    if not raw.strip():
        return MetaVerification(ParseStatus.EMPTY, raw_text=raw, detail="empty output")
    reasoning = split_thinking(raw, opened_thinking)[1]
    body, before, why, failed = _last_block(raw, opened_thinking)
    if body is None:
        return MetaVerification(failed, raw_text=raw, rationale=before, detail=why, reasoning=reasoning)
    fields = _fields(body)
    grade_s, why = _single(fields, "grade", "score", "meta_grade")
    if grade_s is None:
        status = ParseStatus.MISSING_FIELD if why == "missing" else ParseStatus.AMBIGUOUS
        return MetaVerification(status, raw_text=raw, rationale=before, detail=f"grade: {why}", reasoning=reasoning)
    key = grade_s.translate(_NOISE).strip().upper().replace(" ", "_").replace("-", "_")
    if key not in MetaGrade.__members__:
        return MetaVerification(ParseStatus.BAD_VALUE, raw_text=raw, rationale=before, reasoning=reasoning,
                                detail=f"grade: {grade_s!r} is not one of {', '.join(MetaGrade.__members__)}")
    return MetaVerification(ParseStatus.OK, MetaGrade[key], before, raw, reasoning=reasoning)


def _completion_failure(text: str, finish_reason: str | None, reasoning: str, status: str, error: str | None,
                        opened_thinking: bool) -> tuple[ParseStatus, str] | None:
    """The pass status an engine completion gets before its text is read, or None to parse it."""
    if status == "too_long":
        return ParseStatus.TOO_LONG, error or "prompt longer than the model context"
    if status != "ok":
        return ParseStatus.REQUEST_FAILED, error or status
    if finish_reason == "length":
        inside = (not (text or "").strip() and bool(reasoning)) or split_thinking(text, opened_thinking)[0] is None
        where = "inside the thinking" if inside else "before the answer was complete"
        return ParseStatus.TRUNCATED, f"hit max_tokens {where} (finish_reason=length): raise the endpoint's max_tokens"
    if not (text or "").strip() and reasoning:
        return ParseStatus.UNCLOSED_THINKING, "the answer is empty: the output ended inside the thinking"
    return None


def parse_completion(text: str | None, finish_reason: str | None = None, reasoning: str | None = "",
                     n_steps: int | None = None, *, status: str = "ok", error: str | None = None,
                     opened_thinking: bool = False) -> VerificationOutput:
    """One verification pass from an engine completion (``verifier.engine.Completion`` fields).

    ``text`` is the answer (``content``), ``reasoning`` the server-separated thinking, which is
    stored with the pass and never parsed. A completion cut by its budget
    (``finish_reason == "length"``) is ``truncated`` whatever its text holds; an engine
    error keeps its status (``too_long``, ``request_failed``).

    >>> parse_completion("<final_answer>verdict: valid\\nfirst_error_step: -1</final_answer>", "length").status
    <ParseStatus.TRUNCATED: 'truncated'>
    >>> parse_completion("Step 1 fails.\\n<final_answer>verdict: invalid\\nfirst_error_step: 1</final_answer>",
    ...                  "stop", reasoning="let me see").reasoning
    'let me see'
    """
    text, reasoning = text or "", reasoning or ""
    failed = _completion_failure(text, finish_reason, reasoning, status, error, opened_thinking)
    in_text = split_thinking(text, opened_thinking)[1]
    both = "\n\n".join(r for r in (reasoning.strip(), in_text) if r)
    if failed is not None:
        return VerificationOutput(failed[0], raw_text=text, rationale="", detail=failed[1], reasoning=both,
                                  finish_reason=finish_reason)
    out = parse_verification(text, n_steps, opened_thinking)
    return dataclasses.replace(out, reasoning=both, finish_reason=finish_reason)


def finish_reason_of(completion_ids: Sequence[int], eos_token_ids: Sequence[int] | int | None,
                     max_tokens: int | None = None) -> str:
    """How a generation from token ids ended, as vLLM reports it (``Completion.finish_reason``).

    ``"stop"`` when the ids hold an EOS token; ``"length"`` when they end without one at ``max_tokens``
    (or ``max_tokens`` is None), the case ``parse_completion`` makes ``truncated``; ``"stop"`` otherwise
    (a stop string ended it). TRL's GRPO hands the reward these ids (``completion_ids``), so training
    reads a completion through ``parse_completion`` exactly as evaluation does.

    >>> finish_reason_of([5, 9, 2], eos_token_ids=2), finish_reason_of([5, 9, 7], 2, max_tokens=3)
    ('stop', 'length')
    """
    eos = {eos_token_ids} if isinstance(eos_token_ids, int) else set(eos_token_ids or ())
    if any(t in eos for t in completion_ids):
        return "stop"
    return "length" if max_tokens is None or len(completion_ids) >= max_tokens else "stop"


def parse_meta_completion(text: str | None, finish_reason: str | None = None, reasoning: str | None = "", *,
                          status: str = "ok", error: str | None = None, opened_thinking: bool = False
                          ) -> MetaVerification:
    """One meta-verification (B.3) from an engine completion; the same rules as ``parse_completion``."""
    text, reasoning = text or "", reasoning or ""
    failed = _completion_failure(text, finish_reason, reasoning, status, error, opened_thinking)
    in_text = split_thinking(text, opened_thinking)[1]
    both = "\n\n".join(r for r in (reasoning.strip(), in_text) if r)
    if failed is not None:
        return MetaVerification(failed[0], raw_text=text, detail=failed[1], reasoning=both, finish_reason=finish_reason)
    out = parse_meta_verification(text, opened_thinking)
    return dataclasses.replace(out, reasoning=both, finish_reason=finish_reason)


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


# --- answers of the judges from the other seeds (IneqMath, TCS-Bench, ProofJudge) -------------
# Same block/field machinery as above: the last <final_answer> block, ``key: value`` lines,
# one value per field, an explicit status instead of a guess.


@dataclass(frozen=True)
class JudgeAnswer:
    """A parsed non-verdict answer: an IneqMath relation or bound, or ProofJudge rubric scores."""

    status: ParseStatus
    value: Any = None  # relation symbol, bound expression (str), or {dimension: score}
    rationale: str = ""
    raw_text: str = ""
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is ParseStatus.OK

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "parse_status": self.status.value, "detail": self.detail, "text": self.raw_text}


# canonical relation symbols of IneqMath relation prediction (section 2)
RELATIONS = (">", "≥", "=", "≤", "<")
_RELATION_ALIASES = {
    ">": ">", "≥": "≥", ">=": "≥", "\\geq": "≥", "\\ge": "≥", "\\geqslant": "≥", "=": "=", "==": "=",
    "≤": "≤", "<=": "≤", "\\leq": "≤", "\\le": "≤", "\\leqslant": "≤", "<": "<",
    "\\gt": ">", "\\lt": "<", "&gt;": ">", "&lt;": "<", "&gt": ">", "&lt": "<", "&gt;=": "≥", "&lt;=": "≤",
}
_RELATION_OPTION = {"a": "≤", "b": "≥", "c": "=", "d": "<", "e": ">"}  # "(A) ≤ (B) ≥ (C) = (D) < (E) >"


def _answer_fields(text: str | None, names: tuple[str, ...], cls: type | None = None):
    """(value string or None, failed answer or None, rationale) for the first of ``names``."""
    cls = cls or JudgeAnswer
    raw = text or ""
    if not raw.strip():
        return None, cls(ParseStatus.EMPTY, raw_text=raw, detail="empty output"), ""
    body, before, why, failed = _last_block(raw)
    if body is None:
        return None, cls(failed, raw_text=raw, rationale=before.strip(), detail=why), before
    value, why = _single(_fields(body), *names)
    if value is None:
        status = ParseStatus.MISSING_FIELD if why == "missing" else ParseStatus.AMBIGUOUS
        return None, cls(status, raw_text=raw, rationale=before, detail=f"{names[0]}: {why}"), before
    return value, None, before


def parse_relation_answer(text: str | None) -> JudgeAnswer:
    """IneqMath relation prediction: the relation symbol (>, ≥, =, ≤, <) from ``relation:`` or ``answer:``.

    Accepts Unicode, ASCII (``>=``), LaTeX (``\\geq``) and the option letters (A)-(E).

    >>> parse_relation_answer("...\\n<final_answer>\\nrelation: $\\\\geq$\\n</final_answer>").value
    '≥'
    >>> parse_relation_answer("<final_answer>answer: (D)</final_answer>").value
    '<'
    >>> parse_relation_answer("<final_answer>relation: maybe</final_answer>").status
    <ParseStatus.BAD_VALUE: 'bad_value'>
    """
    value, failed, before = _answer_fields(text, ("relation", "answer", "final_answer"))
    if failed:
        return failed
    v = value.replace("$", "").replace(" ", "").strip()
    m = re.fullmatch(r"\(?([A-Ea-e])\)[^A-Za-z]*|([A-E])", v)  # (D), (d) <, D
    sym = _RELATION_ALIASES.get(v) or _RELATION_ALIASES.get(v.lower())
    if sym is None and m:
        sym = _RELATION_OPTION[(m.group(1) or m.group(2)).lower()]
    if sym is None:
        return JudgeAnswer(ParseStatus.BAD_VALUE, raw_text=text or "", rationale=before,
                           detail=f"relation: {value!r} is not one of {' '.join(RELATIONS)}")
    return JudgeAnswer(ParseStatus.OK, sym, before, text or "")


def parse_bound_answer(text: str | None) -> JudgeAnswer:
    """IneqMath bound estimation: the constant C as an expression string (``bound:`` or ``answer:``).

    A leading ``C =`` and surrounding ``$`` are dropped; equivalence is decided later (math-verify).

    >>> parse_bound_answer("<final_answer>\\nbound: $C = \\\\frac{1}{2}$\\n</final_answer>").value
    '\\\\frac{1}{2}'
    >>> parse_bound_answer("<final_answer>answer: </final_answer>").status
    <ParseStatus.BAD_VALUE: 'bad_value'>
    """
    value, failed, before = _answer_fields(text, ("bound", "answer", "c", "constant", "final_answer"))
    if failed:
        return failed
    v = value.strip().strip("$").strip()
    v = re.sub(r"^\\?\(|\\?\)$", "", v) if v.startswith("\\(") else v
    v = re.sub(r"^(?:C|c)\s*=\s*", "", v).strip().strip("$").strip()
    if not v:
        return JudgeAnswer(ParseStatus.BAD_VALUE, raw_text=text or "", rationale=before, detail="bound: empty value")
    return JudgeAnswer(ParseStatus.OK, v, before, text or "")


def _binary(text: str | None, names: tuple[str, ...], yes: tuple[str, ...], no: tuple[str, ...]) -> VerificationOutput:
    value, failed, before = _answer_fields(text, names, VerificationOutput)
    if failed:
        return failed
    v = value.translate(_NOISE).strip().lower()
    if v in yes:
        return VerificationOutput(ParseStatus.OK, Verdict.VALID, NO_STEP, before, text or "")
    if v in no:
        return VerificationOutput(ParseStatus.OK, Verdict.INVALID, NO_STEP, before, text or "")
    return VerificationOutput(ParseStatus.BAD_VALUE, raw_text=text or "", rationale=before,
                              detail=f"{names[0]}: {value!r} is not one of {'/'.join(yes + no)}")


def parse_step_judgment(text: str | None) -> VerificationOutput:
    """An IneqMath step judge (section 4.2): ``verdict: pass`` (no flaw of its kind) or ``fail``.

    Returned as a VerificationOutput (pass = VALID) so that ``aggregate`` combines repeated judgments.

    >>> parse_step_judgment("Only n=1 is checked.\\n<final_answer>\\nverdict: fail\\n</final_answer>").verdict
    <Verdict.INVALID: 'invalid'>
    >>> parse_step_judgment("<final_answer>verdict: perhaps</final_answer>").status
    <ParseStatus.BAD_VALUE: 'bad_value'>
    """
    return _binary(text, ("verdict", "judgment", "judgement"), ("pass", "passed", "valid", "yes", "true"),
                   ("fail", "failed", "invalid", "no", "false"))


def parse_critique(text: str | None) -> VerificationOutput:
    """A TCS-Bench verifier vote or cross-model critique: ``verdict: correct`` or ``incorrect``.

    >>> parse_critique("<final_answer>\\nverdict: correct\\n</final_answer>").accepts
    True
    >>> parse_critique("Looks right to me, correct.").status
    <ParseStatus.NO_ANSWER_BLOCK: 'no_answer_block'>
    """
    return _binary(text, ("verdict", "judgment", "judgement"), ("correct", "valid", "accept", "accepted"),
                   ("incorrect", "invalid", "reject", "rejected", "wrong"))


def parse_equivalence(text: str | None) -> VerificationOutput:
    """The IneqMath final-answer LLM fallback: ``equivalent: yes`` (VALID) or ``no`` (INVALID).

    >>> parse_equivalence("<final_answer>equivalent: yes</final_answer>").accepts
    True
    """
    return _binary(text, ("equivalent", "equivalence", "verdict"), ("yes", "true", "equivalent"),
                   ("no", "false", "not_equivalent", "not equivalent"))


def parse_rubric_scores(text: str | None, dimensions: Sequence[str], low: float = 1, high: float = 10
                        ) -> JudgeAnswer:
    """ProofJudge rubric (section 2.1): one score in [low, high] per dimension, all required.

    Dimension names match field keys after lower-casing and ``_`` for spaces; ``7/10`` reads 7.

    >>> a = parse_rubric_scores("<final_answer>\\nlibrary leverage: 7/10\\nstructural_clarity: 4\\n</final_answer>",
    ...                         ["library_leverage", "structural_clarity"])
    >>> a.value
    {'library_leverage': 7.0, 'structural_clarity': 4.0}
    >>> parse_rubric_scores("<final_answer>library_leverage: 11</final_answer>", ["library_leverage"]).detail
    'library_leverage: 11.0 outside [1, 10]'
    """
    raw = text or ""
    if not raw.strip():
        return JudgeAnswer(ParseStatus.EMPTY, raw_text=raw, detail="empty output")
    body, before, why, failed = _last_block(raw)
    if body is None:
        return JudgeAnswer(failed, raw_text=raw, rationale=before.strip(), detail=why)
    fields = _fields(body)
    scores: dict[str, float] = {}
    for dim in dimensions:
        key = _clean_key(dim)
        value, why = _single(fields, key)
        if value is None:
            status = ParseStatus.MISSING_FIELD if why == "missing" else ParseStatus.AMBIGUOUS
            return JudgeAnswer(status, raw_text=raw, rationale=before, detail=f"{key}: {why}")
        m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*(?:/\s*\d+)?", value.translate(_NOISE).strip())
        if not m:
            return JudgeAnswer(ParseStatus.BAD_VALUE, raw_text=raw, rationale=before,
                               detail=f"{key}: {value!r} is not a number")
        score = float(m.group(1))
        if not low <= score <= high:
            return JudgeAnswer(ParseStatus.BAD_VALUE, raw_text=raw, rationale=before,
                               detail=f"{key}: {score} outside [{low:g}, {high:g}]")
        scores[key] = score
    return JudgeAnswer(ParseStatus.OK, scores, before, raw)
