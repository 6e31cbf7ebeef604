"""IneqMath judges: math-verify bound table, relation symbols, record errors, end to end on vLLM."""

import json
import subprocess
import sys

import pytest

from eval.ineqmath import (
    IneqMathConfig,
    bound_equivalent,
    load_records,
    metrics,
    relation_of,
    run,
    symbolic_answer,
)
from verifier.config import compose
from verifier.io import read_jsonl
from verifier.records import RecordError

DATA = "tests/data/ineqmath_illustrative.jsonl"  # hand-written, illustrative: NOT the benchmark

# (predicted, gold, expected): True = equivalent, False = not, None = math-verify cannot parse
BOUND_TABLE = [
    ("2", "2", True), ("\\frac{4}{2}", "2", True), ("0.5", "\\frac{1}{2}", True), ("\\sqrt{2}", "2^{1/2}", True),
    ("\\frac{3\\sqrt{3}}{2}", "\\frac{\\sqrt{27}}{2}", True), ("\\boxed{27/4}", "6.75", True),
    ("$\\frac{1}{2}$", "1/2", True), ("1/3", "1/2", False), ("3", "4", False), ("\\sqrt{3}", "1.732", False),
    ("-1", "1", False), ("\\frac{1}{", "1", None), ("the constant four", "4", None), ("x+", "2", None),
]


@pytest.mark.parametrize("pred,gold,expected", BOUND_TABLE)
def test_bound_equivalence_table(pred, gold, expected):
    assert bound_equivalent(pred, gold) is expected


@pytest.mark.parametrize("text,symbol", [(">", ">"), (">=", "≥"), ("\\geq", "≥"), ("$\\le$", "≤"), ("=", "="),
                                         ("<", "<"), ("(A)", "≤"), ("(E) >", ">"), ("bigger", None)])
def test_relation_symbols(text, symbol):
    assert relation_of(text) == symbol


def test_symbolic_paths_on_illustrative_set():
    recs, errors = load_records(DATA)
    assert not errors and len(recs) == 9
    got = {r.id: symbolic_answer(r)[:2] for r in recs}
    assert got == {
        "ill-b1": (True, "math_verify"), "ill-b2": (True, "math_verify"), "ill-b3": (False, "math_verify"),
        "ill-b4": (False, "math_verify"), "ill-b5": (None, "unparseable"), "ill-r1": (True, "symbol"),
        "ill-r2": (False, "symbol"), "ill-r3": (True, "symbol"), "ill-r4": (None, "unparseable")}


def test_bad_records_name_id_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    rows = [{"id": "ok", "task": "relation", "problem": "p", "answer": ">", "response": "r"},
            {"id": "r2", "task": "relation", "problem": "p", "answer": "bigger"},
            {"id": "b3", "task": "sum", "problem": "p", "answer": "1"}]
    bad.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(RecordError, match="'r2'.*'answer'"):
        load_records(bad)
    recs, errors = load_records(bad, on_error="skip")
    assert [r.id for r in recs] == ["ok"]
    assert [(e.record_id, e.field) for e in errors] == [("r2", "answer"), ("b3", "task")]


def _independent_metrics(rows, steps):
    n = len(rows)
    return {"answer_acc": sum(r["answer_correct"] for r in rows) / n,
            "overall_acc": sum(r["answer_correct"] and all(r["steps"][s]["pass"] for s in steps) for r in rows) / n,
            "step_acc": {s: sum(r["steps"][s]["pass"] for r in rows) / n for s in steps}}


def test_metrics_overall_needs_answer_and_all_steps():
    steps = ["a", "b"]
    rows = [{"task": "bound", "answer_correct": True, "answer_decided_by": "math_verify", "overall_correct": True,
             "steps": {"a": {"pass": True, "n_unparseable": 0}, "b": {"pass": True, "n_unparseable": 0}}},
            {"task": "relation", "answer_correct": True, "answer_decided_by": "symbol", "overall_correct": False,
             "steps": {"a": {"pass": True, "n_unparseable": 0}, "b": {"pass": False, "n_unparseable": 1}}},
            {"task": "relation", "answer_correct": False, "answer_decided_by": "llm", "overall_correct": False,
             "steps": {"a": {"pass": True, "n_unparseable": 0}, "b": {"pass": True, "n_unparseable": 0}}}]
    m = metrics(rows, steps)["all"]
    assert m["answer_acc"] == pytest.approx(2 / 3) and m["overall_acc"] == pytest.approx(1 / 3)
    assert m["step_failure_rate"]["b"] == pytest.approx(1 / 3) and m["step_unparseable"]["b"] == 1


@pytest.mark.vllm
def test_end_to_end_structured_outputs(endpoint, tmp_path):
    """Five judges on the tiny model; vLLM structured outputs make every judgment parseable."""
    over = [f"out={tmp_path}", f"input={DATA}", "progress=false", "answer_judge.structured=true",
            "answer_judge.max_tokens=64", "answer_judge.temperature=1.0"]
    for s in ("toy_case", "logical_gap", "numerical_approximation", "numerical_computation"):
        over += [f"step_judges.{s}.structured=true", f"step_judges.{s}.max_tokens=64",
                 f"step_judges.{s}.temperature=1.0"]
    cfg = compose("ineqmath", IneqMathConfig, over)
    cfg.endpoint = endpoint
    res = run(cfg)
    rows = read_jsonl(tmp_path / "ineqmath_judgments.jsonl")
    assert len(rows) == 9 and res["n_skipped"] == 0
    by_id = {r["id"]: r for r in rows}
    # the symbolic path decides what it can; the LLM only where symbolic parsing failed
    assert by_id["ill-b1"]["answer_decided_by"] == "math_verify" and by_id["ill-r2"]["answer_decided_by"] == "symbol"
    assert by_id["ill-b5"]["answer_decided_by"] == "llm" and by_id["ill-r4"]["answer_decided_by"] == "llm"
    assert "answer_judge_calls" in by_id["ill-b5"] and "answer_judge_calls" not in by_id["ill-b1"]
    steps = list(cfg.step_judges)
    for r in rows:
        assert all(c["parse_status"] == "ok" for s in steps for c in r["steps"][s]["calls"])
        assert r["overall_correct"] == (r["answer_correct"] and all(r["steps"][s]["pass"] for s in steps))
    m = res["metrics"]["all"]
    ind = _independent_metrics(rows, steps)
    assert m["answer_acc"] == pytest.approx(ind["answer_acc"]) and m["overall_acc"] == pytest.approx(ind["overall_acc"])
    assert m["step_acc"] == pytest.approx(ind["step_acc"])
    assert res["step_judge_parse_counts"] == {"ok": 36}
    report = (tmp_path / "report.md").read_text()
    assert "Overall Acc" in report and (tmp_path / "ineqmath.png").stat().st_size > 0


@pytest.mark.vllm
def test_cli_generates_and_counts_unparseable(endpoint, tmp_path):
    """Random weights without structured outputs: solver + judges unparseable, counted and reported."""
    data = tmp_path / "noresp.jsonl"
    data.write_text("\n".join(json.dumps(d) for d in [
        {"id": "g1", "task": "bound", "problem": "Find the largest C with a^2+b^2 >= C ab.", "answer": "2"},
        {"id": "g2", "task": "relation", "problem": "Compare x^2+1 and 2x.", "answer": "\\geq"}]))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "eval.ineqmath", f"input={data}", f"out={out}", "generate=true", "progress=false",
           f"endpoint.base_url={endpoint.base_url}", f"endpoint.api_key={endpoint.api_key}",
           f"endpoint.model={endpoint.model}", "solver.max_tokens=16", "answer_judge.max_tokens=8"]
    cmd += [f"step_judges.{s}.max_tokens=8" for s in ("toy_case", "logical_gap", "numerical_approximation",
                                                       "numerical_computation")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == f"wrote {out / 'report.md'}"
    res = json.loads((out / "metrics.json").read_text())
    assert res["n_generated"] == 2
    m = res["metrics"]["all"]
    assert m["step_unparseable"] == {s: 2 for s in m["step_unparseable"]}  # counted as failures
    assert m["overall_acc"] == 0.0 and m["answer_decided_by"] == {"unparseable": 2}
    assert sum(res["step_judge_parse_counts"].values()) == 8 and "ok" not in res["step_judge_parse_counts"]
    assert "Unparseable step judgments" in (out / "report.md").read_text()
