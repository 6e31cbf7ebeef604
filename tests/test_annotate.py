"""Label Studio export/import (appendix C.1, C.4, C.5) without the server: config, tasks, C.5 errors.

The round trip through a real Label Studio server is tests/test_label_studio.py.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from data_pipeline.annotate import (
    AUX_HEADER,
    REPORT_CHOICE,
    AnnotateConfig,
    export,
    label_config,
)
from data_pipeline.label_studio import task_to_record
from data_pipeline.ingest import IngestConfig, ingest
from data_pipeline.synthetic import generate_synthetic
from verifier.io import write_jsonl
from verifier.records import RecordError

REPO = Path(__file__).resolve().parents[1]


def ls_result(fields: dict) -> list[dict]:
    """Label Studio result items, as its frontend writes them for our controls."""
    out = []
    for name, v in fields.items():
        if name == "first_fatal_error_step":
            out.append({"from_name": name, "to_name": "proof", "type": "number", "value": {"number": v}})
        elif name == "report_error_case":
            if v:
                out.append({"from_name": name, "to_name": "problem", "type": "choices",
                            "value": {"choices": [REPORT_CHOICE]}})
        else:
            out.append({"from_name": name, "to_name": "proof", "type": "textarea", "value": {"text": [v]}})
    return out


def make_queue(tmp_path: Path, n: int = 4):
    trajs = generate_synthetic(n, seed=3, proofs_per_problem=2)
    rows = []
    for t in trajs:
        d = t.to_dict()
        d.pop("annotation")
        d["meta"] = {"selection": {"entropy": 0.95, "accept_fraction": 0.5, "n_passes": 2, "rank": len(rows)}}
        rows.append(d)
    write_jsonl(tmp_path / "sel" / "annotation_queue.jsonl", rows)
    judgments = [{"id": r["id"], "model": "tiny-verifier", "passes": [
        {"index": 0, "verdict": "invalid", "first_error_step": 1, "parse_status": "ok",
         "text": f"Step 1 of {r['id']} is wrong.\n<final_answer>\nverdict: invalid\nfirst_error_step: 1\n</final_answer>"},
        {"index": 1, "verdict": None, "first_error_step": -1, "parse_status": "no_answer_block", "text": "hmm",
         "detail": "no <final_answer> block"}]} for r in rows[:-1]]  # the last one has no judgment
    write_jsonl(tmp_path / "sel" / "judgments.jsonl", judgments)
    return rows


def test_label_config_is_xml_with_c4_controls():
    root = ET.fromstring(label_config(50))
    names = {e.get("name"): e.tag for e in root.iter() if e.get("name")}
    assert names == {"problem": "Text", "reference_solution": "Text", "proof": "Paragraphs", "auxiliary": "Paragraphs",
                     "reviewer_comment": "TextArea", "first_fatal_error_step": "Number",
                     "recoverable_error_steps": "TextArea", "remark": "TextArea", "report_error_case": "Choices",
                     "correction": "TextArea"}
    num = next(e for e in root.iter("Number"))
    assert (num.get("min"), num.get("max"), num.get("required")) == ("-1", "50", "true")
    assert any(e.get("value") == AUX_HEADER for e in root.iter("Header"))  # marked as unverified references


def test_export_tasks_show_c1_content(tmp_path):
    rows = make_queue(tmp_path)
    out = export(AnnotateConfig(queue=str(tmp_path / "sel" / "annotation_queue.jsonl"), out=str(tmp_path / "ls")))
    tasks = json.loads((out / "tasks.json").read_text())
    assert len(tasks) == len(rows)
    d = tasks[0]["data"]
    assert d["problem"] == rows[0]["problem"] and d["trajectory"]["id"] == rows[0]["id"]
    assert [s["step"] for s in d["proof_steps"]] == [f"Step {i}" for i in range(len(rows[0]["proof_steps"]))]
    aux = {a["source"]: a["text"] for a in d["auxiliary"]}
    assert "0.95 bits" in aux["selection"] and aux["flagged steps"] == "step 1: 1 pass(es)"
    assert aux["tiny-verifier, pass 0"].startswith("verdict: invalid; first error step: 1\nStep 1 of")
    assert aux["tiny-verifier, pass 1"].startswith("unparseable output (no_answer_block")
    last = {a["source"]: a["text"] for a in tasks[-1]["data"]["auxiliary"]}
    assert last["verifier"] == "no verifier passes available for this proof"
    assert (out / "label_config.xml").read_text() == label_config(200)


def _export_of(tmp_path, annotations: list[dict | None]) -> list[dict]:
    rows = make_queue(tmp_path)
    out = export(AnnotateConfig(queue=str(tmp_path / "sel" / "annotation_queue.jsonl"), out=str(tmp_path / "ls")))
    tasks = json.loads((out / "tasks.json").read_text())
    exported = []
    for i, (t, fields) in enumerate(zip(tasks, annotations)):
        anns = [] if fields is None else [{"id": 100 + i, "completed_by": 1, "was_cancelled": False,
                                           "updated_at": "2026-12-01T10:00:00Z", "result": ls_result(fields)}]
        exported.append({"id": 10 + i, "data": t["data"], "annotations": anns})
    assert len(exported) == len(rows)
    return exported


GOOD = [
    {"reviewer_comment": "Step 1 adds wrongly.", "first_fatal_error_step": 1, "recoverable_error_steps": "0"},
    {"reviewer_comment": "All correct.", "first_fatal_error_step": -1, "recoverable_error_steps": "-1"},
    {"reviewer_comment": "", "first_fatal_error_step": -1, "remark": "Problem statement is garbled.",
     "report_error_case": True},
    {"reviewer_comment": "Fine.", "first_fatal_error_step": 2, "recoverable_error_steps": "0, 1",
     "correction": "Use 188 in step 2."},
]


def test_export_json_ingests_to_validated_records(tmp_path):
    exported = _export_of(tmp_path, GOOD)
    (tmp_path / "export.json").write_text(json.dumps(exported))
    r = ingest(IngestConfig(input=str(tmp_path / "export.json"), out=str(tmp_path / "ing"), progress=False))
    assert not r.errors and len(r.records) == 3 and len(r.excluded) == 1
    recs = {t.id: t for t in r.records + r.excluded}
    for task, fields in zip(exported, GOOD):
        t = recs[task["data"]["trajectory_id"]]
        a = t.annotation
        assert a.first_fatal_error_step == fields["first_fatal_error_step"]
        assert a.reviewer_comment == fields["reviewer_comment"] and a.report_error_case == fields.get("report_error_case", False)
        assert t.proof_steps == tuple(task["data"]["trajectory"]["proof_steps"])
        assert t.meta["label_studio"]["task_id"] == task["id"] and "selection" in t.meta
    assert recs[exported[3]["data"]["trajectory_id"]].annotation.recoverable_error_steps == (0, 1)


@pytest.mark.parametrize("fields,field,message", [
    ({"first_fatal_error_step": 1, "recoverable_error_steps": "1, 2"}, "annotation.recoverable_error_steps",
     "must come before the first fatal step"),
    ({"first_fatal_error_step": -1, "report_error_case": True}, "annotation.remark", "remark is empty"),
    ({"reviewer_comment": "no step given"}, "annotation.first_fatal_error_step", "missing"),
    ({"first_fatal_error_step": 40}, "annotation.first_fatal_error_step", "outside the proof"),
    ({"first_fatal_error_step": -1, "recoverable_error_steps": "two"}, "annotation.recoverable_error_steps",
     "expected a step index"),
])
def test_inconsistent_annotation_names_task_and_field(tmp_path, fields, field, message):
    exported = _export_of(tmp_path, [fields, *GOOD[1:]])
    with pytest.raises(RecordError) as e:
        task_to_record(exported[0], 1)
    assert e.value.field == field and message in e.value.message
    assert f"(Label Studio task {exported[0]['id']})" in str(e.value), str(e.value)
    assert exported[0]["data"]["trajectory_id"] in str(e.value)


def test_unannotated_skipped_and_foreign_tasks_are_errors_not_drops(tmp_path):
    exported = _export_of(tmp_path, [None, *GOOD[1:]])
    skipped = copy.deepcopy(exported[1])
    skipped["id"], skipped["annotations"][0]["was_cancelled"] = 99, True
    skipped["data"]["trajectory"]["id"] = skipped["data"]["trajectory_id"] = "skipped-one"
    foreign = {"id": 98, "data": {"text": "someone else's task"}, "annotations": []}
    (tmp_path / "export.json").write_text(json.dumps(exported + [skipped, foreign]))
    r = ingest(IngestConfig(input=str(tmp_path / "export.json"), out=str(tmp_path / "ing"), on_error="skip",
                            progress=False))
    errs = {(e.field, e.message) for e in r.errors}
    assert errs == {("annotations", "no submitted annotation"), ("annotations", "skipped by the annotator"),
                    ("data.trajectory", "missing: not a task written by data_pipeline.annotate export")}
    assert len(r.records) + len(r.excluded) == len(exported) - 1 and r.n_rows == len(exported) + 2
    # the CLI (annotate import == ingest) fails with one report naming every bad task
    cmd = [sys.executable, "-m", "data_pipeline.annotate", "import", f"input={tmp_path / 'export.json'}",
           f"out={tmp_path / 'cli'}", "progress=false"]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 2 and "3 bad record(s)" in p.stderr and "Label Studio task 98" in p.stderr, p.stderr[-2000:]
    p = subprocess.run(cmd + ["on_error=skip"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0 and "rejected=3" in p.stdout, p.stderr[-2000:]


def test_export_cli(tmp_path):
    make_queue(tmp_path)
    p = subprocess.run([sys.executable, "-m", "data_pipeline.annotate", "export",
                        f"queue={tmp_path / 'sel' / 'annotation_queue.jsonl'}", f"out={tmp_path / 'ls'}"],
                       cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1].startswith("annotate export: 4 tasks;")
    p = subprocess.run([sys.executable, "-m", "data_pipeline.annotate", "queue=x"], cwd=REPO, capture_output=True, check=False,
                       text=True, timeout=300)
    assert p.returncode == 2 and "usage:" in p.stderr
