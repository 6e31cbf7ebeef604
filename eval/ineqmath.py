"""IneqMath judging (Sheng et al. 2025, "Solving Inequality Proofs with LLMs", sections 2, 4, 5.1).

``python -m eval.ineqmath input=PATH out=DIR endpoint.base_url=URL endpoint.model=NAME``

Two task formats: bound estimation (the optimal constant C) and relation prediction
(>, ≥, =, ≤, <). Each record is judged by five judges (section 4):

* the final-answer judge (4.1): a relation is compared by symbol; a bound by symbolic
  equivalence with math-verify; only when symbolic parsing fails (no answer block, or an
  expression math-verify cannot read) an LLM judge (``ineq_answer_equiv.j2``) decides.
  Each record says which path decided (``symbol``, ``math_verify``, ``llm``, ``unparseable``);
* four step judges (4.2), each a template: toy-case generalization, logical gap,
  numerical approximation, numerical computation (pass = no flaw of its kind; an
  unparseable step judgment counts as a failure and is reported).

Overall correct = answer correct and all four step judges pass. Metrics (5.1): Answer Acc,
Step Acc per judge (and its failure rate), Overall Acc, by task. Records without a
``response`` get one from the solver (``ineq_solve.j2``) when ``generate=true``.

Input JSONL, one record per line: ``id``, ``task`` (``bound`` | ``relation``), ``problem``,
``answer`` (gold: a relation symbol or the constant), optional ``response`` (the solution to judge).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.judges.core import Judge, PolicyConfig
from verifier.aggregate import aggregate
from verifier.config import EndpointConfig, hydra_main
from verifier.io import read_jsonl, write_jsonl
from verifier.judging import JudgeConfig
from verifier.parser import RELATIONS, parse_bound_answer, parse_relation_answer
from verifier.records import RecordError
from verifier.results import md_table, pct, plot_bars, write_markdown, write_metrics

log = logging.getLogger(__name__)

TASKS = ("bound", "relation")
STEP_JUDGES = ("toy_case", "logical_gap", "numerical_approximation", "numerical_computation")
JUDGMENTS = "ineqmath_judgments.jsonl"  # its rows in out, named for the judge (not judgments.jsonl)


def _step_judge(name: str) -> JudgeConfig:
    return JudgeConfig(template=f"ineq_step_{name}", parser="step_judgment", n=1, temperature=0.0, max_tokens=1024)


@dataclass
class IneqMathConfig:
    """Hydra schema of ``configs/ineqmath.yaml``."""

    input: str = "tests/data/ineqmath_illustrative.jsonl"
    out: str = "runs/ineqmath"
    on_error: str = "raise"  # raise | skip (bad records are counted and listed in the report)
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    generate: bool = False  # solve records that have no response
    solver: JudgeConfig = field(default_factory=lambda: JudgeConfig(template="ineq_solve", parser="relation_answer",
                                                                    n=1, temperature=0.0, max_tokens=4096))
    answer_judge: JudgeConfig = field(default_factory=lambda: JudgeConfig(
        template="ineq_answer_equiv", parser="equivalence", n=1, temperature=0.0, max_tokens=512))
    llm_fallback: bool = True  # LLM final-answer judge when symbolic parsing fails
    response_tail_chars: int = 2000  # end of the response shown to the LLM answer judge
    step_judges: dict[str, JudgeConfig] = field(default_factory=lambda: {k: _step_judge(k) for k in STEP_JUDGES})
    step_policy: PolicyConfig = field(default_factory=PolicyConfig)  # over each step judge's n samples
    progress: bool = True


# --- data ---------------------------------------------------------------------------------------


@dataclass
class IneqRecord:
    id: str
    task: str
    problem: str
    answer: str
    response: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any], line: int | None = None) -> IneqRecord:
        rid = d.get("id")
        if not isinstance(rid, str) or not rid:
            raise RecordError(rid, "id", "missing or not a string", line)
        task = d.get("task")
        if task not in TASKS:
            raise RecordError(rid, "task", f"{task!r} is not one of {', '.join(TASKS)}", line)
        for f in ("problem", "answer"):
            if not isinstance(d.get(f), str) or not d[f].strip():
                raise RecordError(rid, f, "missing or empty", line)
        if task == "relation":
            gold = parse_relation_answer(f"<final_answer>relation: {d['answer']}</final_answer>")
            if not gold.ok:
                raise RecordError(rid, "answer", f"{d['answer']!r} is not a relation ({' '.join(RELATIONS)})", line)
        resp = d.get("response")
        if resp is not None and not isinstance(resp, str):
            raise RecordError(rid, "response", "not a string", line)
        return cls(rid, task, d["problem"], d["answer"], resp)


def load_records(path: str | Path, on_error: str = "raise") -> tuple[list[IneqRecord], list[RecordError]]:
    """Read IneqMath-format JSONL; bad records raise (or are skipped and returned with ``on_error=skip``)."""
    records, errors, seen = [], [], set()
    for i, d in enumerate(read_jsonl(path), start=1):
        try:
            r = IneqRecord.from_dict(d, line=i)
            if r.id in seen:
                raise RecordError(r.id, "id", "duplicate id", i)
            seen.add(r.id)
            records.append(r)
        except RecordError as e:
            if on_error != "skip":
                raise
            errors.append(e)
    return records, errors


# --- the final-answer judge, symbolic path ------------------------------------------------------


def relation_of(answer: str) -> str | None:
    """Canonical relation symbol of a gold or predicted answer (None if it is not one).

    >>> relation_of("\\\\leq"), relation_of(">="), relation_of("bigger")
    ('≤', '≥', None)
    """
    a = parse_relation_answer(f"<final_answer>relation: {answer}</final_answer>")
    return a.value if a.ok else None


def _mv_parse(expr: str):
    # lazy: math_verify (sympy) takes most of a second to import; only the bound check needs it
    from math_verify import parse

    e = expr.strip().strip("$").strip()
    if e.startswith("\\boxed"):
        return parse(e, fallback_mode="no_fallback")
    return parse(f"${e}$", fallback_mode="no_fallback")


def bound_equivalent(pred: str, gold: str) -> bool | None:
    """Symbolic equivalence of two bound answers with math-verify; None when either cannot be parsed.

    A parsed answer that still has free symbols the gold answer lacks (``banana`` reads as a
    product of symbols) is not a constant: treated as unparseable, so the LLM judge decides.

    >>> bound_equivalent("\\\\frac{1}{2}", "0.5"), bound_equivalent("3", "4"), bound_equivalent("\\\\foo{", "1")
    (True, False, None)
    """
    # lazy: math_verify (sympy) takes most of a second to import; only the bound check needs it
    from math_verify import verify

    p, g = _mv_parse(pred), _mv_parse(gold)
    if not p or not g:
        return None

    def syms(x):
        return set(getattr(x[0], "free_symbols", set()))

    if syms(p) - syms(g):
        return None
    return bool(verify(g, p))


def symbolic_answer(rec: IneqRecord) -> tuple[bool | None, str, str | None]:
    """(correct or None if undecided, path, extracted answer) without any model call."""
    if rec.task == "relation":
        a = parse_relation_answer(rec.response)
        if not a.ok:
            return None, "unparseable", None
        return a.value == relation_of(rec.answer), "symbol", a.value
    a = parse_bound_answer(rec.response)
    if not a.ok:
        return None, "unparseable", None
    eq = bound_equivalent(a.value, rec.answer)
    return eq, "math_verify" if eq is not None else "unparseable", a.value


# --- the run ------------------------------------------------------------------------------------


def judge_records(records: list[IneqRecord], cfg: IneqMathConfig) -> list[dict[str, Any]]:
    """Run the five judges on every record (responses must be present); one result row per record."""
    keyed = [(r.id, r) for r in records]
    # final-answer judge: symbolic first
    rows: dict[str, dict[str, Any]] = {}
    need_llm = []
    for rid, r in keyed:
        ok, path, extracted = symbolic_answer(r)
        rows[rid] = {"id": rid, "task": r.task, "gold_answer": r.answer, "extracted_answer": extracted,
                     "answer_correct": bool(ok), "answer_decided_by": path, "response": r.response}
        if ok is None and cfg.llm_fallback:
            need_llm.append(r)
    if need_llm:
        judge = Judge(cfg.endpoint, cfg.answer_judge)
        items = [(r.id, {"task": r.task, "problem": r.problem, "gold_answer": r.answer,
                         "response_tail": (r.response or "")[-cfg.response_tail_chars:]}) for r in need_llm]
        for r, calls in zip(need_llm, judge.run(items, progress=cfg.progress), strict=True):
            agg = aggregate([c.parsed for c in calls], PolicyConfig("majority", n=len(calls)).policy())
            parsed_any = agg.n_unparseable < agg.n_passes
            rows[r.id].update(answer_correct=parsed_any and agg.accepts,
                              answer_decided_by="llm" if parsed_any else "unparseable",
                              answer_judge_calls=[c.to_dict() for c in calls])
    # four step judges
    policy = cfg.step_policy
    for name, jc in cfg.step_judges.items():
        judge = Judge(cfg.endpoint, jc)
        items = [(rid, {"problem": r.problem, "response": r.response or ""}) for rid, r in keyed]
        for (rid, _), calls in zip(keyed, judge.run(items, progress=cfg.progress), strict=True):
            pol = PolicyConfig(policy.kind, n=len(calls), k=policy.k if policy.kind == "k_of_n" else None,
                               unparseable=policy.unparseable).policy()
            agg = aggregate([c.parsed for c in calls], pol)
            rows[rid].setdefault("steps", {})[name] = {
                "pass": agg.accepts, "n_unparseable": agg.n_unparseable, "calls": [c.to_dict() for c in calls]}
    for row in rows.values():
        row["steps_pass"] = all(s["pass"] for s in row["steps"].values())
        row["overall_correct"] = row["answer_correct"] and row["steps_pass"]
    return [rows[rid] for rid, _ in keyed]


def metrics(rows: list[dict[str, Any]], step_names: list[str]) -> dict[str, Any]:
    """Answer Acc, Step Acc (per judge, with failure rate), Overall Acc (section 5.1), overall and by task.

    >>> rows = [{"task": "bound", "answer_correct": True, "answer_decided_by": "math_verify", "overall_correct": False,
    ...          "steps": {"logical_gap": {"pass": False, "n_unparseable": 0}}}]
    >>> m = metrics(rows, ["logical_gap"]); m["all"]["answer_acc"], m["all"]["step_acc"]["logical_gap"]
    (1.0, 0.0)
    """
    def block(rs: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(rs)
        if not n:
            return {"n": 0}
        step_acc = {s: sum(r["steps"][s]["pass"] for r in rs) / n for s in step_names}
        return {
            "n": n,
            "answer_acc": sum(r["answer_correct"] for r in rs) / n,
            "step_acc": step_acc,
            "step_failure_rate": {s: 1 - a for s, a in step_acc.items()},
            "all_steps_pass": sum(all(r["steps"][s]["pass"] for s in step_names) for r in rs) / n,
            "overall_acc": sum(r["overall_correct"] for r in rs) / n,
            "answer_decided_by": dict(Counter(r["answer_decided_by"] for r in rs)),
            "step_unparseable": {s: sum(r["steps"][s]["n_unparseable"] for r in rs) for s in step_names},
        }

    out = {"all": block(rows)}
    for t in TASKS:
        out[t] = block([r for r in rows if r["task"] == t])
    return out


def write_report(out: Path, m: dict[str, Any], step_names: list[str], extra: dict[str, Any]) -> None:
    """Markdown table shaped like IneqMath Table 4 (Overall, Answer, Step Acc per judge) plus a PNG."""
    head = ["split", "n", "Overall Acc %", "Answer Acc %"] + [f"Step Acc %: {s}" for s in step_names]
    lines = ["# IneqMath judging report", "", f"input: `{extra['input']}`; illustrative data is not the "
             "benchmark when it comes from `tests/data/`.", ""]
    lines += md_table(head, ([split, m[split]["n"], pct(m[split]["overall_acc"]), pct(m[split]["answer_acc"]),
                              *(pct(m[split]["step_acc"][s]) for s in step_names)]
                             for split in ("all", *TASKS) if m[split].get("n")))
    a = m["all"]
    lines += ["", "Failure rate per step judge (%): " + ", ".join(
        f"{s} {pct(a['step_failure_rate'][s])}" for s in step_names) if a.get("n") else "",
        "", f"Final answer decided by: {a.get('answer_decided_by', {})}",
        f"Unparseable step judgments (counted as failures): {a.get('step_unparseable', {})}",
        f"Judge calls by parse status: {extra['parse_counts']}",
        f"Skipped records: {len(extra['errors'])}"] + [f"- {e}" for e in extra["errors"]]
    lines += ["", "![accuracies](ineqmath.png)", ""]
    write_markdown(out, lines)
    if a.get("n"):
        plot_bars(["Overall", "Answer", *step_names],
                  [a["overall_acc"], a["answer_acc"], *(a["step_acc"][s] for s in step_names)], out / "ineqmath.png",
                  ylabel="accuracy (%)", title=f"IneqMath judges (n={a['n']})",
                  colors=["C3", "C0"] + ["C2"] * len(step_names))


def run(cfg: IneqMathConfig) -> dict[str, Any]:
    """Load, (solve,) judge, score, write ``ineqmath_judgments.jsonl`` (``JUDGMENTS``), ``metrics.json``,
    ``report.md``, ``ineqmath.png``."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    records, errors = load_records(cfg.input, cfg.on_error)
    missing = [r for r in records if r.response is None]
    if missing and not cfg.generate:
        raise RecordError(missing[0].id, "response", f"missing ({len(missing)} records); set generate=true to solve them")
    if missing:
        for task in TASKS:  # the solver's answer format (and structured-output regex) follows the task
            todo = [r for r in missing if r.task == task]
            sc = cfg.solver
            if sc.parser in ("relation_answer", "bound_answer"):
                sc = dataclasses.replace(sc, parser=f"{task}_answer")
            calls = Judge(cfg.endpoint, sc).run([(r.id, {"task": r.task, "problem": r.problem}) for r in todo],
                                                progress=cfg.progress)
            for r, cs in zip(todo, calls, strict=True):
                r.response = cs[0].text
    rows = judge_records(records, cfg)
    step_names = list(cfg.step_judges)
    m = metrics(rows, step_names)
    all_calls = [c for r in rows for s in r["steps"].values() for c in s["calls"]]
    counts = dict(Counter(c.get("parse_status", c["completion_status"]) for c in all_calls))
    result = {"metrics": m, "n_records": len(records), "n_skipped": len(errors), "n_generated": len(missing),
              "step_judge_parse_counts": counts}
    write_jsonl(out / JUDGMENTS, rows)
    write_metrics(out, result)
    write_report(out, m, step_names, {"input": cfg.input, "errors": [str(e) for e in errors], "parse_counts": counts})
    a = m["all"]
    if a.get("n"):
        print(f"ineqmath n={a['n']} answer_acc={a['answer_acc']:.3f} overall_acc={a['overall_acc']:.3f} "
              + " ".join(f"step_acc.{s}={a['step_acc'][s]:.3f}" for s in step_names))
    print(f"wrote {out / 'report.md'}")
    return result


@hydra_main("ineqmath", IneqMathConfig)
def main(cfg: IneqMathConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()


