"""Ingestion of annotation exports (JSONL, CSV): one error report, exclusions, dataset + card."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from data_pipeline.ingest import IngestConfig, ingest, run
from data_pipeline.synthetic import generate_synthetic
from verifier.errors import InputError
from verifier.formats import load_any
from verifier.io import DatasetError, write_jsonl

REPO = Path(__file__).resolve().parents[1]
CSV_HEADER = ["ID", "Problem ID", "Problem", "proof_steps", "Subject", "Split", "Source", "Reviewer Comment",
              "First Fatal Error Step", "Recoverable Error Steps", "Remark", "Report Error Case",
              "Correction suggestions", "Annotator"]


def _csv_row(t, **over):
    a = t.annotation
    row = {"ID": t.id, "Problem ID": t.problem_id, "Problem": t.problem, "proof_steps": json.dumps(list(t.proof_steps)),
           "Subject": t.subject, "Split": t.split, "Source": "csv-export", "Reviewer Comment": a.reviewer_comment,
           "First Fatal Error Step": str(a.first_fatal_error_step),
           "Recoverable Error Steps": ",".join(map(str, a.recoverable_error_steps)) or "-1",
           "Remark": "", "Report Error Case": "no", "Correction suggestions": a.correction, "Annotator": "ann7"}
    row.update(over)
    return row


def _write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_HEADER)
        w.writeheader()
        w.writerows(rows)


def test_jsonl_roundtrip_dataset_and_card(tmp_path):
    trajs = generate_synthetic(40, seed=2)
    rows = [t.to_dict() for t in trajs]
    rows[3]["annotation"]["report_error_case"] = True
    rows[3]["annotation"]["remark"] = "problem statement is corrupted"
    flat = rows[5].pop("annotation")
    rows[5].update({"First Fatal Error Step": flat["first_fatal_error_step"],
                    "recoverable_error_steps": ",".join(map(str, flat["recoverable_error_steps"])) or "-1",
                    "Reviewer Comment": flat["reviewer_comment"], "correction": flat["correction"]})
    write_jsonl(tmp_path / "ann.jsonl", rows)
    out = tmp_path / "out"
    res = run(IngestConfig(input=str(tmp_path / "ann.jsonl"), out=str(out), progress=False))
    assert len(res.records) == 39 and [t.id for t in res.excluded] == [trajs[3].id] and not res.errors
    back = load_any(out).records
    assert [t.to_dict() for t in back] == [t.to_dict() for t in res.records]
    assert [t.to_dict() for t in load_any(out / "data.parquet").records] == [t.to_dict() for t in res.records]
    assert [t.to_dict() for t in load_any(out / "dataset").records] == [t.to_dict() for t in res.records]
    assert back[4].annotation == trajs[5].annotation  # the flat row was nested back
    from datasets import load_from_disk

    ds = load_from_disk(str(out / "dataset"))
    assert ds.num_rows == 39 and "first_fatal_error_step" in ds.column_names
    card = (out / "README.md").read_text()
    n_valid = sum(t.annotation.is_valid for t in res.records)
    assert f"| valid | {n_valid} |" in card and f"| invalid | {39 - n_valid} |" in card
    assert "excluded (report_error_case, kept in `excluded.jsonl`): 1" in card
    assert "| synthetic | 39 |" in card and "| UG |" in card and "| arithmetic |" in card
    assert len((out / "excluded.jsonl").read_text().splitlines()) == 1
    (tmp_path / "arr.json").write_text(json.dumps([t.to_dict() for t in trajs[:3]] + [{"id": "x"}]))
    arr = ingest(IngestConfig(input=str(tmp_path / "arr.json"), progress=False))
    assert len(arr.records) == 3 and [(e.record_id, e.field, e.line) for e in arr.errors] == [("x", "problem", 4)]


def test_csv_with_annotator_forms_and_extra_columns(tmp_path):
    trajs = generate_synthetic(12, seed=9, recoverable_rate=1.0)
    assert any(len(t.annotation.recoverable_error_steps) == 2 for t in trajs)  # "2,5" form is exercised
    _write_csv(tmp_path / "ann.csv", [_csv_row(t) for t in trajs])
    res = ingest(IngestConfig(input=str(tmp_path / "ann.csv"), progress=False))
    assert not res.errors and len(res.records) == 12
    for got, want in zip(res.records, trajs):
        assert got.annotation == want.annotation and got.proof_steps == want.proof_steps
        assert got.meta["extra"] == {"annotator": "ann7"} and got.source == "csv-export"
    assert res.extra_columns == ["annotator"]
    with pytest.raises(Exception, match="annotator"):
        strict = ingest(IngestConfig(input=str(tmp_path / "ann.csv"), extra_columns="error", progress=False))
        raise DatasetError("x", strict.errors)


def test_every_bad_record_in_one_report(tmp_path):
    t = generate_synthetic(10, seed=4, valid_fraction=0.0, recoverable_rate=0.0)
    rows = [
        _csv_row(t[0], **{"First Fatal Error Step": "99"}),                # out of range
        _csv_row(t[1], **{"proof_steps": "not json"}),                     # bad JSON column
        _csv_row(t[2], **{"Problem": ""}),                                 # missing problem
        _csv_row(t[3]),
        _csv_row(t[3]),                                                    # duplicate id
        _csv_row(t[4], **{"Recoverable Error Steps": "9,1"}),              # after the fatal step / outside
        _csv_row(t[5], **{"Report Error Case": "yes"}),                    # flag without remark
        _csv_row(t[6], **{"First Fatal Error Step": "two"}),               # not an int
        _csv_row(t[7], **{"Report Error Case": "maybe"}),                  # not a bool
        _csv_row(t[8], **{"Report Error Case": "yes", "Remark": "mismatched problem"}),  # excluded, fine
        _csv_row(t[9]),
    ]
    _write_csv(tmp_path / "bad.csv", rows)
    out = tmp_path / "out"
    with pytest.raises(DatasetError) as ei:
        run(IngestConfig(input=str(tmp_path / "bad.csv"), out=str(out), progress=False))
    got = {(e.record_id, e.field) for e in ei.value.errors}
    assert got == {
        (t[0].id, "annotation.first_fatal_error_step"), (t[1].id, "proof_steps"), (t[2].id, "problem"),
        (t[3].id, "id"), (t[4].id, "annotation.recoverable_error_steps"), (t[5].id, "annotation.remark"),
        (t[6].id, "annotation.first_fatal_error_step"), (t[7].id, "annotation.report_error_case"),
    }
    assert not (out / "dataset").exists()  # raise: nothing but the report is written
    report = (out / "errors.txt").read_text()
    assert "8 bad record(s)" in report and t[1].id in report
    res = run(IngestConfig(input=str(tmp_path / "bad.csv"), out=str(out), on_error="skip", progress=False))
    assert [r.id for r in res.records] == [t[3].id, t[9].id] and len(res.excluded) == 1 and len(res.errors) == 8
    assert len(res.records) + len(res.excluded) + len(res.errors) == res.n_rows == 11
    assert "rejected (bad records, see `errors.txt`): 8" in (out / "README.md").read_text()


def test_cli_and_folder_input(tmp_path):
    a, b = generate_synthetic(6, seed=1), generate_synthetic(4, seed=1)
    write_jsonl(tmp_path / "in" / "a.jsonl", a)
    _write_csv(tmp_path / "in" / "b.csv", [_csv_row(x) for x in b[:2]])  # ids clash with a.jsonl
    cmd = [sys.executable, "-m", "data_pipeline.ingest", f"input={tmp_path / 'in'}", f"out={tmp_path / 'o'}",
           "progress=false"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "duplicate id" in r.stderr and "b.csv" in r.stderr and b[0].id in r.stderr
    r = subprocess.run(cmd + ["on_error=skip"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "ingested 6 records" in r.stdout and "rejected=2" in r.stdout


def _one_based(ann: dict) -> dict:
    """An annotation as a 1-based export writes it (none stays -1)."""
    fatal = ann["first_fatal_error_step"]
    return {**ann, "first_fatal_error_step": fatal + 1 if fatal >= 0 else -1,
            "recoverable_error_steps": [s + 1 for s in ann["recoverable_error_steps"]]}


def test_field_map_reads_nested_fields_before_the_aliases(tmp_path):
    trajs = generate_synthetic(8, seed=5, recoverable_rate=1.0)
    rows = []
    for t in trajs:
        d = t.to_dict()
        a, gen = d.pop("annotation"), d.pop("generator", "")
        d["uid"] = d.pop("id")
        d["label"] = {"first_error": a["first_fatal_error_step"], "minor": a["recoverable_error_steps"], "by": "ann3"}
        d["meta_info"] = {"model": gen or "gen-x"}
        d["Comment"], d["Suggested corrections"] = a["reviewer_comment"], a["correction"]  # aliases apply after it
        rows.append(d)
    write_jsonl(tmp_path / "own.jsonl", rows)
    fmap = {"uid": "id", "label.first_error": "first_fatal_error_step", "label.minor": "recoverable_error_steps",
            "meta_info.model": "generator"}
    out = tmp_path / "out"
    res = run(IngestConfig(input=str(tmp_path / "own.jsonl"), out=str(out), field_map=fmap, progress=False))
    assert not res.errors and [r.id for r in res.records] == [t.id for t in trajs]
    for got, want in zip(res.records, trajs):
        assert got.annotation == want.annotation and got.generator == (want.generator or "gen-x")
        assert got.meta["extra"] == {"label": {"by": "ann3"}}  # the unmapped rest of a nested object is kept
    assert "meta_info" not in res.extra_columns  # emptied by the mapping
    assert "`label.first_error` -> `first_fatal_error_step`" in (out / "README.md").read_text()
    assert json.loads((out / "ingest_summary.json").read_text())["field_map"] == fmap
    # the annotation nested under our key but with the export's own field names
    nested = [{**{k: v for k, v in t.to_dict().items() if k != "annotation"},
               "annotation": {"fatal": t.annotation.first_fatal_error_step, "reviewer_comment": "ok"}} for t in trajs]
    write_jsonl(tmp_path / "nested.jsonl", nested)
    res = ingest(IngestConfig(input=str(tmp_path / "nested.jsonl"), field_map={"annotation.fatal": "first_fatal_error_step"},
                              progress=False))
    assert not res.errors
    assert [r.annotation.first_fatal_error_step for r in res.records] == [t.annotation.first_fatal_error_step for t in trajs]
    # a mapped field missing in a row is an error naming the record and the field, never ignored
    del rows[2]["label"]["first_error"]
    write_jsonl(tmp_path / "own.jsonl", rows)
    res = ingest(IngestConfig(input=str(tmp_path / "own.jsonl"), field_map=fmap, progress=False))
    assert [(e.record_id, e.field, e.line) for e in res.errors] == [(trajs[2].id, "label.first_error", 3)]
    assert "field_map maps it to 'first_fatal_error_step'" in res.errors[0].message


def test_unknown_field_map_target_is_refused_before_any_work(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", generate_synthetic(2, seed=1))
    for fmap, key in (({"label.first_error": "first_error_step"}, "label.first_error"),
                      ({"label.first_error": "first_fatal_error_step", "fatal": "first_fatal_error_step"}, "fatal"),
                      ({"comment": "comment"}, "comment")):  # an alias is not a target: our field names only
        with pytest.raises(InputError, match=rf"field 'field_map', key '{key}'"):
            run(IngestConfig(input=str(tmp_path / "a.jsonl"), out=str(tmp_path / "out"), field_map=fmap, progress=False))
    assert not (tmp_path / "out").exists()
    cmd = [sys.executable, "-m", "data_pipeline.ingest", f"input={tmp_path / 'a.jsonl'}", f"out={tmp_path / 'out'}",
           "field_map={label.first_error: fatal_error_step}", "progress=false"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "key 'label.first_error'" in r.stderr and "first_fatal_error_step" in r.stderr


def test_one_based_jsonl_and_csv_are_converted(tmp_path):
    trajs = generate_synthetic(30, seed=6, recoverable_rate=1.0)
    assert any(t.annotation.first_fatal_error_step >= 0 for t in trajs)
    assert any(t.annotation.recoverable_error_steps for t in trajs)
    rows = [{**t.to_dict(), "annotation": _one_based(t.annotation.to_dict())} for t in trajs]
    for r in rows[::2]:  # flat rows as well as nested ones
        r.update(r.pop("annotation"))
    write_jsonl(tmp_path / "one.jsonl", rows)
    csv_rows = []
    for t in trajs:
        a = _one_based(t.annotation.to_dict())
        csv_rows.append(_csv_row(t, **{"First Fatal Error Step": str(a["first_fatal_error_step"]),
                                       "Recoverable Error Steps": ",".join(map(str, a["recoverable_error_steps"])) or "-1"}))
    _write_csv(tmp_path / "one.csv", csv_rows)
    for name in ("one.jsonl", "one.csv"):
        out = tmp_path / name.replace(".", "_")
        res = run(IngestConfig(input=str(tmp_path / name), out=str(out), step_index_base=1, progress=False))
        assert not res.errors
        assert [r.annotation for r in res.records] == [t.annotation for t in trajs]  # every step back by one
        assert "step_index_base: 1 (converted to zero-based on ingest)" in (out / "README.md").read_text()
        summary = json.loads((out / "ingest_summary.json").read_text())
        assert summary["step_index_base"] == 1 and summary["step_index_note"] == "converted to zero-based on ingest"
    plain = ingest(IngestConfig(input=str(tmp_path / "one.jsonl"), on_error="skip", progress=False))
    shifted = {r.id: r.annotation.first_fatal_error_step for r in plain.records}
    assert all(shifted[t.id] == t.annotation.first_fatal_error_step + 1 for t in trajs
               if t.id in shifted and t.annotation.first_fatal_error_step >= 0)  # read zero-based: one step later


def test_one_based_step_zero_and_bad_base_are_errors(tmp_path):
    t = generate_synthetic(6, seed=7, valid_fraction=0.0, recoverable_rate=0.0)
    _write_csv(tmp_path / "one.csv", [
        _csv_row(t[0], **{"First Fatal Error Step": "0"}),                     # 0 is no 1-based step
        _csv_row(t[1], **{"First Fatal Error Step": "3", "Recoverable Error Steps": "0,1"}),
        _csv_row(t[2], **{"First Fatal Error Step": str(len(t[2].proof_steps) + 1)}),  # past the last step
        _csv_row(t[3], **{"First Fatal Error Step": "1"}),
    ])
    res = ingest(IngestConfig(input=str(tmp_path / "one.csv"), step_index_base=1, progress=False))
    assert [(e.record_id, e.field) for e in res.errors] == [
        (t[0].id, "annotation.first_fatal_error_step"), (t[1].id, "annotation.recoverable_error_steps"),
        (t[2].id, "annotation.first_fatal_error_step")]
    assert "step 0 in a 1-based export" in res.errors[0].message and "1-based" in res.errors[2].message
    assert [r.annotation.first_fatal_error_step for r in res.records] == [0]
    for bad in (2, -1, True):
        with pytest.raises(InputError, match="field 'step_index_base'"):
            run(IngestConfig(input=str(tmp_path / "one.csv"), out=str(tmp_path / "out"), step_index_base=bad,
                             progress=False))
    assert not (tmp_path / "out").exists()
    # a Label Studio export of data_pipeline.annotate tasks is zero-based by construction
    (tmp_path / "export.json").write_text(json.dumps([{"id": 7, "data": {"trajectory": t[4].to_dict()},
                                                      "annotations": []}]))
    with pytest.raises(InputError, match="Label Studio export.*zero-based by construction"):
        ingest(IngestConfig(input=str(tmp_path / "export.json"), step_index_base=1, progress=False))


def test_docs_list_every_alias():
    """docs/data_pipeline.md shows every annotation field and the aliases table generated from ALIASES."""
    from data_pipeline.ingest import ALIASES, ANNOTATION_FIELDS, TRAJECTORY_FIELDS, aliases_table

    docs = (REPO / "docs" / "data_pipeline.md").read_text()
    assert aliases_table() in docs
    assert all(f"\n| `{f}` | " in docs.split("### The annotation schema")[1] for f in ANNOTATION_FIELDS)  # each field a row
    assert set(ALIASES.values()) <= {*TRAJECTORY_FIELDS, *ANNOTATION_FIELDS}
    assert all(f"`{a}`" in aliases_table() for a in ALIASES)
