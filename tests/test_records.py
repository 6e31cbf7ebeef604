"""Record types and JSONL validation (appendix C)."""

import json

import pytest

from verifier.io import DatasetError, load_trajectories, write_jsonl
from verifier.records import Annotation, MetaGrade, ProofTrajectory, RecordError, Verdict

GOOD = {"id": "p1-a", "problem_id": "p1", "problem": "Show x.", "proof_steps": ["a", "b", "c"],
        "subject": "Probability", "split": "UG",
        "annotation": {"reviewer_comment": "Step 1 is wrong.", "first_fatal_error_step": 1,
                       "recoverable_error_steps": "0", "remark": "", "report_error_case": False}}


def test_example_record_from_issue_and_derived_labels():
    t = ProofTrajectory.from_dict(GOOD)
    assert t.annotation.first_fatal_error_step == 1
    assert t.annotation.recoverable_error_steps == (0,)
    assert t.gold_verdict is Verdict.INVALID and not t.annotation.fully_correct
    assert ProofTrajectory.from_dict(t.to_dict()) == t


@pytest.mark.parametrize("fatal,rec,valid,fully", [
    (-1, -1, True, True), ("-1", "-1", True, True), (-1, "2,5", True, False), (-1, [2, 5], True, False),
    (6, "2, 5", False, False), (None, None, True, True), (3, [], False, False),
])
def test_annotator_forms_and_label_semantics(fatal, rec, valid, fully):
    a = Annotation.from_dict({"first_fatal_error_step": fatal, "recoverable_error_steps": rec}, "r", n_steps=10)
    assert a.is_valid is valid and a.fully_correct is fully


@pytest.mark.parametrize("patch,field", [
    ({"annotation": {**GOOD["annotation"], "first_fatal_error_step": 3}}, "annotation.first_fatal_error_step"),
    ({"annotation": {**GOOD["annotation"], "recoverable_error_steps": "1,2"}}, "annotation.recoverable_error_steps"),
    ({"annotation": {**GOOD["annotation"], "recoverable_error_steps": "x"}}, "annotation.recoverable_error_steps"),
    ({"annotation": {**GOOD["annotation"], "report_error_case": True}}, "annotation.remark"),
    ({"problem": ""}, "problem"),
    ({"problem": None}, "problem"),
    ({"proof_steps": []}, "proof_steps"),
    ({"proof_steps": ["a", 3]}, "proof_steps[1]"),
    ({"verdict": "valid"}, "verdict"),
])
def test_errors_name_record_and_field(patch, field):
    with pytest.raises(RecordError) as e:
        ProofTrajectory.from_dict({**GOOD, **patch})
    assert e.value.record_id == "p1-a" and e.value.field == field
    assert "p1-a" in str(e.value) and field in str(e.value)


def test_missing_problem_id_is_derived_from_the_problem():
    """The id every leak check uses (``problem_id_of``), not an error (issue 26)."""
    from verifier.identity import problem_id_of

    for pid in (None, "", "  "):
        t = ProofTrajectory.from_dict({**GOOD, "problem_id": pid})
        assert t.problem_id == problem_id_of(GOOD["problem"])


def test_verdict_and_grade_values():
    with pytest.raises(RecordError, match="unknown verdict"):
        Verdict.parse("perhaps", "r1")
    with pytest.raises(RecordError, match="unknown meta grade"):
        MetaGrade.parse("GOOD", "r1")
    assert MetaGrade.BASIC_MATCH >= MetaGrade.POOR_MATCH and MetaGrade.BASIC_MATCH < MetaGrade.EXACT_MATCH


def test_loader_reports_every_bad_record_then_skips_with_counts(tmp_path):
    rows = [GOOD,
            {**GOOD, "id": "p2-a", "problem": ""},
            {**GOOD, "id": "p1-a"},  # duplicate
            {**GOOD, "id": "p3-a", "annotation": {"first_fatal_error_step": 9}},
            {**GOOD, "id": "p4-a"}]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{not json\n")
    with pytest.raises(DatasetError) as e:
        load_trajectories(path)
    msg = str(e.value)
    assert len(e.value.errors) == 4
    for needle in ("'p2-a'", "'problem'", "duplicate id", "'p3-a'", "outside the proof", "invalid JSON", "line 6"):
        assert needle in msg
    res = load_trajectories(path, on_error="skip")
    assert [r.id for r in res.records] == ["p1-a", "p4-a"] and res.skipped == 4
    assert res.summary() == "loaded=2 skipped=4"


def test_write_then_load_roundtrip(tmp_path):
    t = ProofTrajectory.from_dict(GOOD)
    write_jsonl(tmp_path / "x.jsonl", [t, ProofTrajectory.from_dict({**GOOD, "id": "z"})])
    assert load_trajectories(tmp_path / "x.jsonl").records[0] == t
