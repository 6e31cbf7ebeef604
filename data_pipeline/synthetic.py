"""A synthetic proof-verification task for CPU-scale runs.

``python -m data_pipeline.synthetic out=DIR n=1000 [seed=0] [min_steps=3] [max_steps=6] ...``

Each "proof" is a short step-by-step derivation: a left-to-right arithmetic chain
("Compute 23 + 45 - 12 + 8.", subject ``arithmetic``) or the same chain on like terms
("Simplify 23x + 45x - 12x + 8x.", subject ``algebra``). One operation per step, then a
final "So the answer is ..." step. Errors are planted with exact annotations (appendix C.4):

* fatal (invalidates the chain, propagates to the answer; zero-based ``first_fatal_error_step``):
  ``wrong_result`` (``68 - 12 = 57``), ``wrong_operand`` (a step starts from a value other
  than the previous result) and ``wrong_final`` (the answer does not match the last result);
* recoverable (a notation slip that keeps every value, only before the fatal step):
  ``double_equals`` (``23 + 45 == 68``) and ``arrow`` (``23 + 45 -> 68``).

Every error is checkable locally (one step against itself or the step before it), so a
model of a few million parameters can learn to verify the task on a CPU. Difficulty is
tunable: number of steps, operand magnitude, operations, error size (``error_delta_*``:
1 is subtle, 10+ is obvious), the fraction of valid proofs and of recoverable slips.
Generation is deterministic for a seed (each problem has its own ``random.Random``).

``gold_verification(traj)`` is the canonical verifier answer (``format_verification``) with
a rationale that names the failing step, for SFT targets; ``style="stepwise"`` re-checks every
step up to the first fatal one ("Step 1: 151 + 37 = 188, not 198, fatal error."; local checks a tiny
model can learn, in words its tokenizer knows), ``style="short"`` is the reviewer comment.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from tqdm import tqdm

from verifier.config import hydra_main
from verifier.errors import InputError
from verifier.formats import load_any
from verifier.identity import ProblemIndex, problem_id_of
from verifier.io import write_jsonl
from verifier.parser import format_verification
from verifier.records import NO_STEP, Annotation, ProofTrajectory, Verdict
from verifier.templates import as_messages, verification_prompt

FATAL_KINDS = ("wrong_result", "wrong_operand", "wrong_final")
RECOVERABLE_KINDS = ("double_equals", "arrow")
SUBJECTS = ("arithmetic", "algebra")
_SLIP = {"double_equals": "==", "arrow": "->"}
_SLIP_NAME = {"double_equals": "'==' instead of '='", "arrow": "'->' instead of '='"}
GENERATOR = "synthetic-v1"


@dataclass
class SyntheticConfig:
    """Knobs of the synthetic task (defaults: 3-6 steps, 2-digit operands, + and -)."""

    out: str | None = None  # output folder (the CLI writes synthetic.jsonl, sft.jsonl, summary.json there)
    n: int = 1000  # number of trajectories
    seed: int = 0
    proofs_per_problem: int = 2  # trajectories sharing one problem (selection and splits group by problem)
    min_steps: int = 3  # proof steps, including the final answer step
    max_steps: int = 6
    min_operand: int = 1
    max_operand: int = 99  # operand magnitude: 9 = one digit, 99 = two digits
    ops: str = "+-"  # any of "+", "-", "*"
    max_multiplier: int = 9  # right operand of "*"
    valid_fraction: float = 0.5  # fraction of trajectories without a fatal error
    recoverable_rate: float = 0.3  # probability that a trajectory has recoverable slips
    max_recoverable: int = 2
    error_delta_min: int = 1  # size of a planted wrong value: 1 = subtle ...
    error_delta_max: int = 10  # ... larger = obvious
    fatal_kinds: list[str] = field(default_factory=lambda: list(FATAL_KINDS))
    recoverable_kinds: list[str] = field(default_factory=lambda: list(RECOVERABLE_KINDS))
    subjects: list[str] = field(default_factory=lambda: list(SUBJECTS))
    qe_fraction: float = 0.2  # problems in the harder "QE" split (one extra step); others are "UG"
    reference: str = "answer"  # reference_solution: none | answer | full
    id_prefix: str = "syn"
    # problem_id from the problem text (same text, same problem: splits by problem never leak a problem seen
    # in training into the held-out set, which matters when the problem space is small); default: by index
    problem_id_from_text: bool = False
    write_sft: bool = True  # also write sft.jsonl (prompt + gold verification, TRL conversational format)
    sft_style: str = "stepwise"  # stepwise | short
    with_reference_in_prompt: bool = True
    # trajectory JSONL: problems whose text occurs there are skipped (candidate proofs for fresh problems only,
    # so that no selected candidate shares a problem with a held-out proof of that file)
    exclude_problems_of: str | None = None
    progress: bool = True

    def validate(self) -> None:
        """Raise ValueError naming the bad option."""
        def bad(name: str, why: str) -> None:
            raise InputError(f"synthetic config, field {name!r}: {why}")

        if self.n < 0:
            bad("n", "must be >= 0")
        if self.proofs_per_problem < 1:
            bad("proofs_per_problem", "must be >= 1")
        if not 2 <= self.min_steps <= self.max_steps:
            bad("min_steps", f"need 2 <= min_steps <= max_steps, got {self.min_steps}, {self.max_steps}")
        if not 0 <= self.min_operand <= self.max_operand or self.max_operand < 1:
            bad("max_operand", f"need 0 <= min_operand <= max_operand, >= 1; got {self.min_operand}, {self.max_operand}")
        if not self.ops or set(self.ops) - set("+-*"):
            bad("ops", f"use a non-empty subset of '+-*', got {self.ops!r}")
        if self.max_multiplier < 2:
            bad("max_multiplier", "must be >= 2")
        for name in ("valid_fraction", "recoverable_rate", "qe_fraction"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                bad(name, f"must be in [0, 1], got {v}")
        if not 1 <= self.error_delta_min <= self.error_delta_max:
            bad("error_delta_min", f"need 1 <= error_delta_min <= error_delta_max, got {self.error_delta_min}, "
                                   f"{self.error_delta_max}")
        for name, allowed in (("fatal_kinds", FATAL_KINDS), ("recoverable_kinds", RECOVERABLE_KINDS),
                              ("subjects", SUBJECTS)):
            vals = list(getattr(self, name))
            unknown = [v for v in vals if v not in allowed]
            if unknown:
                bad(name, f"unknown {unknown}; allowed {list(allowed)}")
            if name != "recoverable_kinds" and not vals:
                bad(name, "must not be empty")
        if self.valid_fraction < 1.0 and not self.fatal_kinds:
            bad("fatal_kinds", "empty while invalid proofs are requested")
        if self.reference not in ("none", "answer", "full"):
            bad("reference", f"use none, answer or full, got {self.reference!r}")
        if self.sft_style not in ("stepwise", "check", "copy_check", "short"):
            bad("sft_style", f"use stepwise, check, copy_check or short, got {self.sft_style!r}")


# ---------------------------------------------------------------------------------------------
# One problem: a chain of operations


@dataclass(frozen=True)
class _Op:
    left: int
    op: str
    right: int

    @property
    def value(self) -> int:
        return _apply(self.left, self.op, self.right)


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _chain(rng: random.Random, n_ops: int, cfg: SyntheticConfig) -> tuple[int, list[tuple[str, int]]]:
    """Start value and (op, operand) pairs; values stay non-negative (subtraction never below 0)."""
    start = rng.randint(max(cfg.min_operand, 1), cfg.max_operand)
    cur, ops = start, []
    for _ in range(n_ops):
        op = rng.choice(cfg.ops)
        if op == "-" and cur <= max(cfg.min_operand, 1):
            op = "+" if "+" in cfg.ops else "*"
        if op == "-":
            b = rng.randint(max(cfg.min_operand, 1), min(cfg.max_operand, cur - 1))
        elif op == "*":
            b = rng.randint(2, cfg.max_multiplier)
        else:
            b = rng.randint(max(cfg.min_operand, 1), cfg.max_operand)
        ops.append((op, b))
        cur = _apply(cur, op, b)
    return start, ops


def _term(v: int, var: str) -> str:
    return f"{v}{var}"


def _expression(start: int, ops: list[tuple[str, int]], var: str) -> str:
    expr, last_additive = _term(start, var), False
    for op, b in ops:
        if op == "*":
            expr = f"({expr}) * {b}" if last_additive else f"{expr} * {b}"
            last_additive = False
        else:
            expr = f"{expr} {op} {_term(b, var)}"
            last_additive = True
    return expr


def _step_text(left: int, op: str, right: int, result: int, var: str, eq: str = "=") -> str:
    r = str(right) if op == "*" else _term(right, var)
    return f"{_term(left, var)} {op} {r} {eq} {_term(result, var)}"


def _final_text(value: int, var: str) -> str:
    return f"So the answer is {_term(value, var)}." if not var else f"So the expression equals {_term(value, var)}."


def _wrong(rng: random.Random, true: int, cfg: SyntheticConfig) -> int:
    d = rng.randint(cfg.error_delta_min, cfg.error_delta_max)
    if true - d >= 0 and rng.random() < 0.5:
        return true - d
    return true + d


def _make_trajectory(rng: random.Random, cfg: SyntheticConfig, pid: str, tid: str, problem: str, var: str,
                     start: int, ops: list[tuple[str, int]], subject: str, split: str, reference: str) -> ProofTrajectory:
    n_ops = len(ops)
    valid = rng.random() < cfg.valid_fraction
    fatal_kind, fatal = None, NO_STEP
    if not valid:
        kinds = [k for k in cfg.fatal_kinds if not (k == "wrong_operand" and n_ops < 2)]
        fatal_kind = rng.choice(kinds)
        if fatal_kind == "wrong_final":
            fatal = n_ops
        elif fatal_kind == "wrong_operand":
            fatal = rng.randint(1, n_ops - 1)
        else:
            fatal = rng.randint(0, n_ops - 1)
    # Recoverable slips on operation steps before the fatal step (C.4), anywhere if valid.
    eligible = list(range(n_ops if fatal == NO_STEP else min(fatal, n_ops)))
    slips: dict[int, str] = {}
    if cfg.recoverable_kinds and eligible and rng.random() < cfg.recoverable_rate:
        k = rng.randint(1, min(cfg.max_recoverable, len(eligible)))
        for s in sorted(rng.sample(eligible, k)):
            slips[s] = rng.choice(cfg.recoverable_kinds)

    steps: list[str] = []
    planted: dict[str, Any] = {}
    cur = start  # the value the proof carries (wrong after a fatal error)
    true_cur = start
    for i, (op, b) in enumerate(ops):
        left = cur
        if i == fatal and fatal_kind == "wrong_operand":
            left = _wrong(rng, cur, cfg)
            planted = {"expected": cur, "written": left, "left": cur}
        result = _apply(left, op, b)
        if i == fatal and fatal_kind == "wrong_result":
            result = _wrong(rng, result, cfg)
            planted = {"expected": _apply(left, op, b), "written": result, "left": left, "op": op, "right": b}
        steps.append(_step_text(left, op, b, result, var, _SLIP.get(slips.get(i, ""), "=")))
        cur = result
        true_cur = _apply(true_cur, op, b)
    final = cur
    if fatal_kind == "wrong_final":
        final = _wrong(rng, cur, cfg)
        planted = {"expected": cur, "written": final}
    steps.append(_final_text(final, var))

    comment, correction = _review(fatal_kind, fatal, planted, slips, var, true_cur, ops, steps)
    ann = Annotation(
        reviewer_comment=comment,
        first_fatal_error_step=fatal,
        recoverable_error_steps=tuple(sorted(slips)),
        correction=correction,
    )
    return ProofTrajectory(
        id=tid, problem_id=pid, problem=problem, proof_steps=tuple(steps), reference_solution=reference,
        subject=subject, split=split, source="synthetic", generator=GENERATOR, annotation=ann,
        meta={"synthetic": {"fatal_kind": fatal_kind, "recoverable": {str(k): v for k, v in slips.items()},
                            "answer": true_cur, "stated_answer": final, "planted": planted, "var": var}},
    )


def _review(fatal_kind: str | None, fatal: int, planted: dict[str, Any], slips: dict[int, str], var: str,
            answer: int, ops: list[tuple[str, int]], steps: list[str]) -> tuple[str, str]:
    """Reviewer comment naming each error, and a correction suggestion (appendix C.4, section 4.2)."""
    parts, fixes = [], []
    for s, kind in sorted(slips.items()):
        parts.append(f"Step {s} writes {_SLIP_NAME[kind]}; a recoverable notation slip that does not change the value.")
        fixes.append(f"In step {s} write '=' instead of '{_SLIP[kind]}'.")
    if fatal_kind == "wrong_result":
        p = planted
        r = str(p["right"]) if p["op"] == "*" else _term(p["right"], var)
        parts.append(f"Step {fatal} is wrong: {_term(p['left'], var)} {p['op']} {r} = {_term(p['expected'], var)}, "
                     f"not {_term(p['written'], var)}. The wrong value propagates to the answer, so the proof is invalid.")
        fixes.append(f"In step {fatal} write {_term(p['expected'], var)} instead of {_term(p['written'], var)} and "
                     f"recompute the later steps; the answer is {_term(answer, var)}.")
    elif fatal_kind == "wrong_operand":
        p = planted
        parts.append(f"Step {fatal} is wrong: it starts from {_term(p['written'], var)}, but step {fatal - 1} gave "
                     f"{_term(p['expected'], var)}. The wrong value propagates to the answer, so the proof is invalid.")
        fixes.append(f"Start step {fatal} from {_term(p['expected'], var)} and recompute the later steps; "
                     f"the answer is {_term(answer, var)}.")
    elif fatal_kind == "wrong_final":
        p = planted
        parts.append(f"Step {fatal} is wrong: the last result is {_term(p['expected'], var)}, but the proof states "
                     f"{_term(p['written'], var)} as the answer, so the proof is invalid.")
        fixes.append(f"State the answer {_term(p['expected'], var)} in step {fatal}.")
    else:
        parts.append("All computations are correct; the proof is valid.")
    return " ".join(parts), " ".join(fixes)


def _problem(rng: random.Random, cfg: SyntheticConfig, index: int) -> dict[str, Any]:
    split = "QE" if rng.random() < cfg.qe_fraction else "UG"
    n_steps = rng.randint(cfg.min_steps, cfg.max_steps) + (1 if split == "QE" else 0)
    subject = rng.choice(cfg.subjects)
    var = "x" if subject == "algebra" else ""
    start, ops = _chain(rng, n_steps - 1, cfg)
    expr = _expression(start, ops, var)
    problem = f"Compute {expr}." if not var else f"Simplify {expr}."
    value = start
    derivation = []
    for op, b in ops:
        derivation.append(_step_text(value, op, b, _apply(value, op, b), var))
        value = _apply(value, op, b)
    if cfg.reference == "none":
        reference = ""
    elif cfg.reference == "answer":
        reference = f"The result is {_term(value, var)}."
    else:
        reference = " ".join(f"{d}." for d in derivation) + f" The result is {_term(value, var)}."
    return {"split": split, "subject": subject, "var": var, "start": start, "ops": ops, "problem": problem,
            "reference": reference}


def iter_synthetic(cfg: SyntheticConfig) -> Iterator[ProofTrajectory]:
    """Yield ``cfg.n`` trajectories, ``cfg.proofs_per_problem`` per problem, deterministically."""
    cfg.validate()
    n_problems = math.ceil(cfg.n / cfg.proofs_per_problem) if cfg.n else 0
    width = max(6, len(str(n_problems)))
    excluded = ProblemIndex(load_any(cfg.exclude_problems_of).records if cfg.exclude_problems_of else ())
    made, p, skipped = 0, -1, 0
    while made < cfg.n:
        p += 1
        if skipped > 100 * max(cfg.n, 1):
            raise InputError(f"synthetic config, field 'exclude_problems_of': {skipped} drawn problems were all in "
                             f"{cfg.exclude_problems_of}; the knobs leave too few fresh problems for n={cfg.n}")
        rng = random.Random(f"{cfg.seed}:{p}")
        prob = _problem(rng, cfg, p)
        if excluded.has_text(prob["problem"]):
            skipped += 1
            continue
        pid = f"{cfg.id_prefix}-{cfg.seed}-{p:0{width}d}"
        tid = pid
        if cfg.problem_id_from_text:
            pid = problem_id_of(prob["problem"], prefix=cfg.id_prefix)
        for k in range(min(cfg.proofs_per_problem, cfg.n - made)):
            yield _make_trajectory(rng, cfg, pid, f"{tid}-{k}", prob["problem"], prob["var"], prob["start"],
                                   prob["ops"], prob["subject"], prob["split"], prob["reference"])
            made += 1


def generate_synthetic(n: int, seed: int = 0, **options: Any) -> list[ProofTrajectory]:
    """``n`` annotated synthetic trajectories (see ``SyntheticConfig`` for ``options``).

    >>> ts = generate_synthetic(4, seed=1, valid_fraction=0.0, recoverable_rate=0.0)
    >>> len(ts), all(not t.annotation.is_valid for t in ts), ts[0].problem_id == ts[1].problem_id
    (4, True, True)
    >>> generate_synthetic(3, seed=7) == generate_synthetic(3, seed=7)
    True
    """
    options.setdefault("progress", False)
    return list(iter_synthetic(SyntheticConfig(n=n, seed=seed, **options)))


# ---------------------------------------------------------------------------------------------
# Gold verification (SFT target)


def _parse_op_step(text: str) -> tuple[str, str, str, str, str] | None:
    """(left, op, right, eq, result) of an operation step, or None for the final step."""
    parts = text.split(" ")
    if len(parts) == 5 and parts[1] in "+-*" and parts[3] in ("=", "==", "->"):
        return parts[0], parts[1], parts[2], parts[3], parts[4]
    return None


def gold_verification(traj: ProofTrajectory, style: str = "stepwise") -> str:
    """The canonical verifier answer for a synthetic trajectory (parsed by ``verifier.parser``).

    The rationale names every recoverable slip and the first fatal step, so that the rule
    meta-verifier grades it EXACT_MATCH. ``stepwise`` re-checks each step up to the fatal one.

    >>> from verifier.parser import parse_verification
    >>> t = generate_synthetic(1, seed=3, valid_fraction=0.0)[0]
    >>> out = parse_verification(gold_verification(t), len(t.proof_steps))
    >>> out.verdict.value, out.first_error_step == t.annotation.first_fatal_error_step
    ('invalid', True)
    """
    ann = traj.annotation
    if ann is None:
        raise InputError(f"record {traj.id!r}, field 'annotation': a gold verification needs an annotation")
    info = (traj.meta or {}).get("synthetic")
    if style == "short" or info is None:
        return format_verification(ann.polarity, ann.first_fatal_error_step, ann.reviewer_comment
                                   or ("The proof is valid." if ann.is_valid else
                                       f"Step {ann.first_fatal_error_step} is wrong."))
    target_step = info.get("target_step")  # with_noisy_steps: the answer block names this step instead
    if style in ("check", "copy_check"):
        text = _check_verification(traj, info, copy_first=style == "copy_check")
        if target_step is not None and ann.first_fatal_error_step != NO_STEP:
            text = text.replace(f"first_error_step: {ann.first_fatal_error_step}\n</final_answer>",
                                f"first_error_step: {target_step}\n</final_answer>")
        return text
    if style != "stepwise":
        raise InputError(f"unknown style {style!r} (use stepwise, check, copy_check or short)")
    var = info.get("var", "")
    fatal = ann.first_fatal_error_step
    lines = []
    prev_value: str | None = None
    last = len(traj.proof_steps) - 1 if fatal == NO_STEP else fatal
    for i in range(last + 1):
        parsed = _parse_op_step(traj.proof_steps[i])
        if parsed is None:  # final answer step
            claimed = traj.proof_steps[i].rstrip(".").split(" ")[-1]
            if i == fatal:
                lines.append(f"Step {i}: the answer is {prev_value}, not {claimed}, fatal error.")
            else:
                lines.append(f"Step {i}: the answer {claimed} is correct.")
            continue
        left, op, right, eq, result = parsed
        if i == fatal and info.get("fatal_kind") == "wrong_operand":
            lines.append(f"Step {i}: the value from step {i - 1} is {prev_value}, not {left}, fatal error.")
            break
        a = int(left[:-1] if var else left)
        b = int(right[:-1] if (var and op != "*") else right)
        true = _term(_apply(a, op, b), var)
        if true != result:
            lines.append(f"Step {i}: {left} {op} {right} = {true}, not {result}, fatal error.")
            break
        note = f"; {eq} for = is a recoverable error" if eq != "=" else ""
        lines.append(f"Step {i}: {left} {op} {right} = {true}, correct{note}.")
        prev_value = result
    if fatal == NO_STEP:
        lines.append("All steps are correct." if not ann.recoverable_error_steps
                     else "No fatal error, so the proof is valid.")
    return format_verification(Verdict.INVALID if fatal != NO_STEP else Verdict.VALID, fatal, "\n".join(lines))


def step_start(text: str) -> str:
    """The value a proof step starts from: the left operand of an operation step, the stated answer of the
    final step (what ``style="check"`` compares with the previous result)."""
    parsed = _parse_op_step(text)
    return text.rstrip(".").split(" ")[-1] if parsed is None else parsed[0]


def _check_verification(traj: ProofTrajectory, info: dict[str, Any], copy_first: bool = False) -> str:
    """``style="check"``: the proof re-read step by step, each value it starts from checked against the value
    the step before gave. Step 0 is copied; every later operation step gets "Step i: <start> vs <previous
    result>, ok: <the step>" (the copy puts that step's result next to the following check), the answer step
    "Step n: <answer> vs <last result>, ok"; the first mismatch ends with ", fatal":

        Step 0: 9 - 8 = 1
        Step 1: 1 vs 1, ok: 1 + 8 = 9
        Step 2: 17 vs 9, fatal

    Copying and comparing values a few tokens apart is what a tiny model learns from a few thousand examples
    (``wrong_operand`` and ``wrong_final`` errors); a ``wrong_result`` step is named with its true value and a
    recoverable slip gets its own line, so the rule meta-verifier grades every gold text EXACT_MATCH.

    ``copy_first`` (``style="copy_check"``) copies each step first, as the prompt writes it, then compares:
    "Step i: <the step> | <start> vs <previous result>, ok". After "Step i: " the copy continues the prompt's own
    "Step i: <the step>" line, and both values compared sit in the completion a few tokens back; in the check
    style the start is written before the step is copied, and a tiny model learns the shortcut start = previous
    result, which is right on every line but the fatal one (reports/diagnosis_2026-12-04_reading_copy.md):

        Step 0: 9 - 8 = 1
        Step 1: 1 + 8 = 9 | 1 vs 1, ok
        Step 2: 17 - 3 = 14 | 17 vs 9, fatal
    """
    ann = traj.annotation
    fatal = ann.first_fatal_error_step
    var = info.get("var", "")
    last = len(traj.proof_steps) - 1 if fatal == NO_STEP else fatal
    lines: list[str] = []
    prev: str | None = None
    for i in range(last + 1):
        text = traj.proof_steps[i]
        parsed = _parse_op_step(text)
        start = step_start(text)
        if prev is None:
            lines.append(f"Step {i}: {text}")
        elif copy_first:
            lines.append(f"Step {i}: {text} | {start} vs {prev}, " + ("fatal" if start != prev else "ok"))
            if start != prev:
                break
        elif start != prev:
            lines.append(f"Step {i}: {start} vs {prev}, fatal")
            break
        else:
            lines.append(f"Step {i}: {start} vs {prev}, ok" + (f": {text}" if parsed is not None else ""))
        if parsed is not None:
            left, op, right, eq, result = parsed
            if eq != "=":
                lines.append(f"Step {i}: {eq} for =, recoverable")
            if i == fatal and info.get("fatal_kind") == "wrong_result":
                a = int(left[:-1] if var else left)
                b = int(right[:-1] if (var and op != "*") else right)
                lines.append(f"Step {i}: {left} {op} {right} = {_term(_apply(a, op, b), var)}, not {result}, fatal")
            prev = result
    if fatal == NO_STEP:
        lines.append("All steps are correct.")
    return format_verification(Verdict.INVALID if fatal != NO_STEP else Verdict.VALID, fatal, "\n".join(lines))


def with_noisy_steps(trajs: list[ProofTrajectory], fraction: float, seed: int = 0, min_shift: int = 2,
                     max_shift: int = 3) -> tuple[list[ProofTrajectory], int]:
    """Noisier SFT targets (the localisation warm start of reports/learning_2026-12-02_item4_first.md): copies of ``trajs`` in which ``fraction`` of the invalid ones
    get a ``style="check"`` target whose answer names a first error step ``min_shift..max_shift`` away from the
    true one (inside the proof; the rationale is unchanged). A warm start trained on them gets the polarity
    right more often than the step, so a reward that grades the step (Meta-Ver-RL) has something to teach
    that polarity alone (Rough-RL) does not. Returns (copies, how many targets were moved).

    >>> from verifier.parser import parse_verification
    >>> t = generate_synthetic(40, seed=1, min_steps=6, max_steps=8, recoverable_rate=0.0)
    >>> noisy, n = with_noisy_steps(t, 1.0)
    >>> n == sum(not x.annotation.is_valid for x in t) and n > 0
    True
    >>> x = next(x for x in noisy if not x.annotation.is_valid)
    >>> step = parse_verification(gold_verification(x, "check")).first_error_step
    >>> abs(step - x.annotation.first_fatal_error_step) in (2, 3)
    True
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"with_noisy_steps: fraction must be in [0, 1], got {fraction}")
    rng = random.Random(seed)
    out, moved = [], 0
    for t in trajs:
        ann = t.annotation
        info = (t.meta or {}).get("synthetic")
        if ann is None or ann.is_valid or info is None or rng.random() >= fraction:
            out.append(t)
            continue
        fatal, n = ann.first_fatal_error_step, len(t.proof_steps)
        options = [fatal + d for k in range(min_shift, max_shift + 1) for d in (-k, k) if 0 <= fatal + d < n]
        if not options:
            out.append(t)
            continue
        meta = {**t.meta, "synthetic": {**info, "target_step": rng.choice(options)}}
        out.append(dataclasses.replace(t, meta=meta))
        moved += 1
    return out, moved


def sft_row(traj: ProofTrajectory, style: str = "stepwise", with_reference: bool = True) -> dict[str, Any]:
    """A TRL conversational prompt-completion row: the verification prompt and the gold answer."""

    return {"id": traj.id, "problem_id": traj.problem_id,
            "prompt": as_messages(verification_prompt(traj, with_reference=with_reference)),
            "completion": [{"role": "assistant", "content": gold_verification(traj, style)}]}


def summarize(trajs: list[ProofTrajectory]) -> dict[str, Any]:
    """Counts by polarity, split, subject, fatal kind, and recoverable slips."""
    pol = Counter(t.annotation.polarity.value for t in trajs if t.annotation)
    return {
        "n": len(trajs),
        "problems": len({t.problem_id for t in trajs}),
        "polarity": dict(pol),
        "fully_correct": sum(1 for t in trajs if t.annotation and t.annotation.fully_correct),
        "split": dict(Counter(t.split for t in trajs)),
        "subject": dict(Counter(t.subject for t in trajs)),
        "fatal_kind": dict(Counter(str(t.meta["synthetic"]["fatal_kind"]) for t in trajs)),
        "with_recoverable": sum(1 for t in trajs if t.annotation and t.annotation.recoverable_error_steps),
        "steps": dict(sorted(Counter(len(t.proof_steps) for t in trajs).items())),
    }


def write_synthetic(cfg: SyntheticConfig) -> dict[str, Any]:
    """Write ``synthetic.jsonl`` (+ ``sft.jsonl``, ``summary.json``) under ``cfg.out``; returns the summary."""

    if not cfg.out:
        raise InputError("synthetic config, field 'out': an output folder is required (out=DIR)")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    trajs = list(tqdm(iter_synthetic(cfg), total=cfg.n, desc="synthetic", disable=not cfg.progress))
    write_jsonl(out / "synthetic.jsonl", trajs)
    if cfg.write_sft:
        write_jsonl(out / "sft.jsonl", (sft_row(t, cfg.sft_style, cfg.with_reference_in_prompt) for t in trajs))
    summary = {"config": asdict(cfg), **summarize(trajs)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def main() -> None:
    """Hydra app: ``python -m data_pipeline.synthetic out=DIR n=1000``."""

    @hydra_main("synthetic", SyntheticConfig)
    def _run(cfg: SyntheticConfig) -> None:
        s = write_synthetic(cfg)
        print(f"wrote {s['n']} trajectories ({s['problems']} problems; polarity {s['polarity']}) to "
              f"{Path(cfg.out) / 'synthetic.jsonl'}")

    _run()


if __name__ == "__main__":
    main()
