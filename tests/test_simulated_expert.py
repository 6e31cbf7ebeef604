"""The simulated expert (data_pipeline.simulated_expert): its annotations equal the exact checker's truth on planted
cases, its Label Studio export passes data_pipeline.ingest exactly as a human export does (same validation, card,
provenance, marked as simulated), a malformed export fails there naming the record and field, the budget is spent
and counted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data_pipeline.annotate import AnnotateConfig, export
from data_pipeline.ingest import IngestConfig, ingest
from data_pipeline.ingest import run as ingest_run
from data_pipeline.simulated_expert import SIMULATED_BY, annotate_tasks, expert_annotation
from data_pipeline.synthetic import generate_synthetic
from data_pipeline.synthetic_check import check_proof, gold_proof
from verifier.io import DatasetError, write_jsonl

REPO = Path(__file__).resolve().parents[1]


def test_annotations_equal_the_planted_truth():
    """On planted proofs (every fatal kind, recoverable slips) the simulated expert names exactly the planted first
    fatal step and recoverable steps, and its correction is the planted step as it should read."""
    trajs = generate_synthetic(400, seed=11, recoverable_rate=0.6, ops="+-*", subjects=["arithmetic", "algebra"],
                               error_delta_min=1, error_delta_max=5)
    kinds = set()
    for t in trajs:
        a, c = expert_annotation(t.problem, t.proof_steps)
        want = t.annotation
        assert (a.first_fatal_error_step, a.recoverable_error_steps) == (
            want.first_fatal_error_step, want.recoverable_error_steps), (t.id, t.proof_steps, c)
        assert a.is_valid == want.is_valid == c.true
        if not a.is_valid:
            kinds.add(c.kind)
            assert f"Step {a.first_fatal_error_step} is wrong" in a.reviewer_comment
            assert f"Step {a.first_fatal_error_step} should read" in a.correction
    assert kinds == {"wrong_result", "wrong_operand", "wrong_final"}


def test_a_prover_s_own_errors_are_named():
    """Errors no generator plants: a skipped operation, an extra step, a step that is not a computation."""
    p = "Compute 5 + 3 - 2 + 4."
    gold = gold_proof(p)
    a, c = expert_annotation(p, [gold[0], "9 - 2 = 7", "7 + 4 = 11", "So the answer is 11."])
    assert (a.first_fatal_error_step, c.kind) == (1, "wrong_operand")  # a result carried wrongly
    a, c = expert_annotation(p, [gold[0], "8 + 4 = 12", "So the answer is 12."])
    assert (a.first_fatal_error_step, c.kind, c.expected) == (1, "skipped_step", "8 - 2 = 6")
    a, c = expert_annotation(p, [*gold, "10 + 1 = 11"])
    assert (a.first_fatal_error_step, c.kind) == (4, "extra_step")
    a, c = expert_annotation(p, [gold[0], "then subtract", *gold[2:]])
    assert (a.first_fatal_error_step, c.kind) == (1, "malformed_step")
    a, _ = expert_annotation("Prove Fermat's last theorem.", ["trivial"])
    assert a.report_error_case and a.remark
    assert check_proof(p, gold).true and expert_annotation(p, gold)[0].is_valid


def _queue(tmp_path: Path, n: int = 6) -> list[dict]:
    """A queue of proofs as a prover writes them: some true, some with its own errors."""
    rows = []
    for i, t in enumerate(generate_synthetic(n, seed=5, proofs_per_problem=1, recoverable_rate=0.0,
                                                subjects=["arithmetic"])):
        steps = gold_proof(t.problem)
        if i % 2:  # a wrong operation result in the middle step
            left, op, right, _, _ = steps[1].split()
            steps[1] = f"{left} {op} {right} = {int(steps[1].split()[-1]) + 1}"
        d = t.to_dict()
        d.pop("annotation")
        d["proof_steps"] = steps
        d["generator"] = "prover-a"
        rows.append(d)
    write_jsonl(tmp_path / "sel" / "annotation_queue.jsonl", rows)
    export(AnnotateConfig(queue=str(tmp_path / "sel" / "annotation_queue.jsonl"), out=str(tmp_path / "tasks")))
    return rows


def test_export_passes_ingest_marked_simulated(tmp_path):
    """The command writes a Label Studio export that `python -m data_pipeline.ingest` reads as a human export:
    records equal the checker's truth, provenance says simulated, the card counts it; the budget is counted."""
    rows = _queue(tmp_path, 6)
    r = subprocess.run([sys.executable, "-m", "data_pipeline.simulated_expert", f"tasks={tmp_path / 'tasks' / 'tasks.json'}",
                        f"out={tmp_path / 'sim'}", "budget=4"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "annotated 4 of 6 queued proofs" in r.stdout
    summary = json.loads((tmp_path / "sim" / "simulated_expert_summary.json").read_text())
    assert (summary["spent"], summary["over_budget"], summary["verdicts"]) == (4, 2, {"invalid": 2, "valid": 2})
    r = subprocess.run([sys.executable, "-m", "data_pipeline.ingest", f"input={tmp_path / 'sim' / 'export.json'}",
                        f"out={tmp_path / 'ingested'}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = ingest(IngestConfig(input=str(tmp_path / "sim" / "export.json"), progress=False))
    assert len(res.records) == 4 and not res.errors
    for rec, row in zip(res.records, rows):
        assert rec.id == row["id"] and rec.generator == "prover-a"
        truth = check_proof(rec.problem, rec.proof_steps)
        assert rec.annotation.is_valid == truth.true
        assert rec.annotation.first_fatal_error_step == truth.step
        assert rec.meta["label_studio"]["simulated_by"] == SIMULATED_BY
    card = (tmp_path / "ingested" / "README.md").read_text()
    assert f"| simulated: {SIMULATED_BY} | 4 |" in card


def test_malformed_export_fails_at_ingest_naming_the_record(tmp_path):
    _queue(tmp_path, 4)
    tasks = json.loads((tmp_path / "tasks" / "tasks.json").read_text())
    exp, _ = annotate_tasks(tasks, budget=4)
    bad = next(t for t in exp if any(i["from_name"] == "first_fatal_error_step" and i["value"]["number"] >= 1
                                     for i in t["annotations"][0]["result"]))
    for item in bad["annotations"][0]["result"]:  # a recoverable step after the first fatal step (C.5)
        if item["from_name"] == "recoverable_error_steps":
            item["value"]["text"] = ["2"]
        if item["from_name"] == "first_fatal_error_step":
            item["value"]["number"] = 1
    (tmp_path / "bad.json").write_text(json.dumps(exp))
    with pytest.raises(DatasetError) as e:
        ingest_run(IngestConfig(input=str(tmp_path / "bad.json"), out=str(tmp_path / "out"), progress=False))
    msg = str(e.value)
    assert f"{bad['data']['trajectory_id']} (Label Studio task {bad['id']})" in msg
    assert "annotation.recoverable_error_steps" in msg


def test_budget_and_bad_tasks_are_errors_before_work(tmp_path):
    with pytest.raises(Exception, match="budget"):
        annotate_tasks([], budget=-1)
    with pytest.raises(Exception, match="data.trajectory"):
        annotate_tasks([{"data": {"problem": "x"}}], budget=1)
    exp, s = annotate_tasks([], budget=3)
    assert exp == [] and (s["spent"], s["left"]) == (0, 3)
