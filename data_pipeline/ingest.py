"""Ingest expert annotation exports into a validated Hugging Face dataset (section 3.3, appendix C).

``python -m data_pipeline.ingest input=PATH out=DIR [on_error=raise|skip] [field_map={...}] [step_index_base=0|1]``

Reads JSONL (our trajectory layout with the annotation nested under ``annotation``, or
flat rows with the appendix C fields at top level; a ``.json`` array of such rows) or CSV (one column per trajectory
field and per annotation field; ``proof_steps`` as a JSON list, or a ``proof`` text
column split on ``Step k:`` markers; ``meta`` as a JSON object). Column names are
normalised ("First Fatal Error Step" -> ``first_fatal_error_step``) and the annotators'
forms are accepted (``-1``, ``"2,5"``, ``yes``/``no``). A Label Studio JSON export of the tasks
written by ``data_pipeline.annotate export`` is recognised and mapped back (``verifier.formats.task_to_record``;
errors name the Label Studio task id and the field). A folder ingests every
``*.jsonl``/``*.csv`` in it, ids unique across all of them.

Annotations in the user's own format: ``field_map`` renames the export's fields to ours, nested source
fields with dots (``'field_map={label.first_error: first_fatal_error_step}'``), before the aliases and
checks apply (a mapped field missing in a row is a bad record); ``step_index_base=1`` reads the step
fields of an export that counts steps from 1 and stores them zero-based (appendix C.4), as the card
and ``ingest_summary.json`` record. Neither applies to Label Studio exports (ours by construction).

Every bad record is reported with its id, field and line in ONE error report
(``DatasetError``; written to ``errors.txt`` and ``errors.jsonl``); with ``on_error=raise``
(default) nothing else is written, with ``skip`` the good records are written and the
skipped ones counted in the card. ``report_error_case`` records are excluded, counted and
kept in ``excluded.jsonl``. Output folder: ``dataset/`` (``save_to_disk`` Arrow),
``data.parquet``, ``trajectories.jsonl`` (our JSONL), ``README.md`` (dataset card with
counts by polarity, split, subject and source) and ``ingest_summary.json``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from tqdm import tqdm

from verifier.config import hydra_main
from verifier.errors import EXIT_USER_ERROR, InputError
from verifier.formats import format_of, is_label_studio_export, task_to_record, to_dataset
from verifier.io import DatasetError, iter_jsonl, write_jsonl
from verifier.records import NO_STEP, Annotation, ProofTrajectory, RecordError, parse_step, parse_step_list
from verifier.templates import split_proof_steps

TRAJECTORY_FIELDS = tuple(f.name for f in dataclasses.fields(ProofTrajectory))
ANNOTATION_FIELDS = tuple(f.name for f in dataclasses.fields(Annotation))
ALIASES = {
    "trajectory_id": "id", "proof_id": "id", "record_id": "id",
    "problem_statement": "problem", "question": "problem",
    "steps": "proof_steps", "reference": "reference_solution", "official_solution": "reference_solution",
    "model": "generator",
    "comment": "reviewer_comment", "review": "reviewer_comment",
    "first_fatal_step": "first_fatal_error_step", "fatal_error_step": "first_fatal_error_step",
    "recoverable_steps": "recoverable_error_steps", "recoverable_error_step": "recoverable_error_steps",
    "report_error": "report_error_case", "error_case": "report_error_case",
    "correction_suggestions": "correction", "correction_suggestion": "correction", "corrections": "correction",
    "suggested_corrections": "correction", "suggested_correction": "correction",
    "remarks": "remark", "note": "remark", "notes": "remark",
}
EXPORT_FORMATS = ("jsonl", "csv", "json")  # of verifier.formats.format_of
STEP_FIELDS = ("first_fatal_error_step", "recoverable_error_steps")  # the annotation's step indices (appendix C.4)
MAP_TARGETS = (*TRAJECTORY_FIELDS, *ANNOTATION_FIELDS, "proof")  # field_map targets; proof: text split on Step k:
_BOOL = {"true": True, "1": True, "yes": True, "y": True, "x": True,
         "false": False, "0": False, "no": False, "n": False, "": False}


@dataclass
class IngestConfig:
    """Options of ``python -m data_pipeline.ingest`` (mirrored by ``configs/ingest.yaml``)."""

    input: str | None = None  # JSONL/CSV file, or a folder of them
    out: str | None = None
    on_error: str = "raise"  # raise: one error report, nothing written | skip: write the good records, count the rest
    require_annotation: bool = True  # an export record without annotation fields is an error
    extra_columns: str = "meta"  # meta: unknown columns go to meta["extra"] | error: unknown column = bad record
    name: str = "annotations"  # dataset name in the card
    progress: bool = True
    # dict[str, str]: the export's field names onto ours, nested source fields with dots,
    # {"label.first_error": "first_fatal_error_step"}; typed Any so that a command line's field_map={...} replaces it
    field_map: Any = None
    step_index_base: int = 0  # 1: the export counts steps from 1; converted to zero-based on ingest


@dataclass
class IngestResult:
    """What ingestion kept, excluded and rejected."""

    records: list[ProofTrajectory]
    excluded: list[ProofTrajectory] = field(default_factory=list)  # report_error_case
    errors: list[RecordError] = field(default_factory=list)
    extra_columns: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    n_rows: int = 0
    field_map: dict[str, str] = field(default_factory=dict)
    step_index_base: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "field_map": self.field_map,
            "step_index_base": self.step_index_base,
            "step_index_note": step_note(self.step_index_base),
            "rows": self.n_rows,
            "kept": len(self.records),
            "excluded_report_error_case": len(self.excluded),
            "rejected": len(self.errors),
            "extra_columns": self.extra_columns,
            **counts(self.records),
        }


def normalize_key(key: str) -> str:
    """Column name -> field name.

    >>> normalize_key("First Fatal Error Step"), normalize_key("Correction suggestions"), normalize_key(" ID ")
    ('first_fatal_error_step', 'correction', 'id')
    """
    k = re.sub(r"[^0-9a-z]+", "_", str(key).strip().lower()).strip("_")
    return ALIASES.get(k, k)


def aliases_table() -> str:
    """The Markdown table of ``ALIASES`` by our field, as docs/data_pipeline.md shows it (a test keeps them equal)."""
    rows = [f"| `{f}` | {', '.join(f'`{a}`' for a, t in ALIASES.items() if t == f)} |"
            for f in (*TRAJECTORY_FIELDS, *ANNOTATION_FIELDS) if f in ALIASES.values()]
    return "| our field | also accepted (after normalisation) |\n|---|---|\n" + "\n".join(rows) + "\n"


def _json_cell(value: Any, rid: str | None, name: str, kind: type, line: int | None) -> Any:
    if not isinstance(value, str):
        return value
    if not value.strip():
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise RecordError(rid, name, f"expected a JSON {kind.__name__} in this column: {e.msg}", line) from None
    if not isinstance(parsed, kind):
        raise RecordError(rid, name, f"expected a JSON {kind.__name__}, got {type(parsed).__name__}", line)
    return parsed


def normalize_row(raw: dict[str, Any], line: int | None, from_csv: bool, extra_policy: str = "meta"
                  ) -> tuple[dict[str, Any], list[str]]:
    """An export row (flat or nested, CSV strings or JSON values) -> our JSONL record layout.

    Returns the record dict and the unknown columns it carried (moved to ``meta["extra"]``).
    """
    row = {}
    for k, v in raw.items():
        if k is None:  # csv: more cells than header columns
            raise RecordError(_guess_id(raw), "<csv>", "row has more cells than the header", line)
        nk = normalize_key(k)
        if nk in row and v not in (None, ""):
            if row[nk] not in (None, ""):
                raise RecordError(_guess_id(raw), nk, f"given twice (column {k!r} and another spelling)", line)
        if nk not in row or v not in (None, ""):
            row[nk] = v
    rid = row.get("id")
    rid = None if rid is None or str(rid).strip() == "" else str(rid).strip()
    if from_csv:
        for name, kind in (("proof_steps", list), ("meta", dict), ("annotation", dict)):
            if name in row:
                row[name] = _json_cell(row[name], rid, name, kind, line)
        for name in ("reference_solution", "subject", "split", "source", "generator", "problem_id"):
            if row.get(name) == "":
                row[name] = None
    if row.get("proof_steps") in (None, "") and isinstance(row.get("proof"), str) and row["proof"].strip():
        row["proof_steps"] = split_proof_steps(row["proof"])
    row.pop("proof", None)
    flat = {k: row.pop(k) for k in list(row) if k in ANNOTATION_FIELDS}
    nested = row.get("annotation")
    if nested is not None and any(v not in (None, "") for v in flat.values()):
        raise RecordError(rid, "annotation", "given both as a nested object and as flat annotation fields", line)
    if nested is None and any(v not in (None, "") for v in flat.values()):
        ann = {k: v for k, v in flat.items() if v is not None}
        for b in ("report_error_case", "fatal_step_unknown"):
            if isinstance(ann.get(b), str):
                s = ann[b].strip().lower()
                if s not in _BOOL:
                    raise RecordError(rid, f"annotation.{b}", f"expected true/false, got {ann[b]!r}", line)
                ann[b] = _BOOL[s]
        row["annotation"] = ann
    unknown = sorted(k for k in row if k not in TRAJECTORY_FIELDS)
    if unknown:
        if extra_policy == "error":
            raise RecordError(rid, unknown[0], "unknown column (extra_columns=error)", line)
        meta = row.get("meta") or {}
        if not isinstance(meta, dict):
            raise RecordError(rid, "meta", "expected an object", line)
        extra = {k: row.pop(k) for k in unknown}
        row["meta"] = {**meta, "extra": {**meta.get("extra", {}), **extra}}
    return row, unknown


def _guess_id(raw: dict[str, Any]) -> str | None:
    for k, v in raw.items():
        if k is not None and normalize_key(k) == "id" and v not in (None, ""):
            return str(v)
    return None


def check_field_map(field_map: Any) -> dict[str, str]:
    """``IngestConfig.field_map`` checked before any work: every target one of our fields, once.

    >>> check_field_map({"label.first_error": "first_fatal_error_step", "meta_info.model": "generator"})
    {'label.first_error': 'first_fatal_error_step', 'meta_info.model': 'generator'}
    >>> check_field_map({"label.first_error": "first_error_step"})
    Traceback (most recent call last):
    ...
    verifier.errors.InputError: ingest config, field 'field_map', key 'label.first_error': target 'first_error_step' is not one of our fields (trajectory: id, problem_id, problem, proof_steps, reference_solution, subject, split, source, generator, annotation, meta; annotation: reviewer_comment, first_fatal_error_step, recoverable_error_steps, remark, report_error_case, correction, fatal_step_unknown; or proof, a text split on Step k: markers)
    """
    if field_map is None:
        return {}
    if not isinstance(field_map, dict):
        raise InputError(f"ingest config, field 'field_map': expected a mapping source field -> our field, "
                         f"got {type(field_map).__name__}")
    out: dict[str, str] = {}
    by_target: dict[str, str] = {}
    for src, dst in field_map.items():
        where = f"ingest config, field 'field_map', key {src!r}"
        if not isinstance(src, str) or not src.strip() or any(not p for p in src.split(".")):
            raise InputError(f"{where}: expected a source field name (nested fields with dots: label.first_error)")
        if dst not in MAP_TARGETS:
            hint = (f"; did you mean {normalize_key(dst)!r}?"
                    if isinstance(dst, str) and normalize_key(dst) in MAP_TARGETS else "")
            raise InputError(
                f"{where}: target {dst!r} is not one of our fields (trajectory: {', '.join(TRAJECTORY_FIELDS)}; "
                f"annotation: {', '.join(ANNOTATION_FIELDS)}; or proof, a text split on Step k: markers){hint}")
        if dst in by_target:
            raise InputError(f"{where}: target {dst!r} is also the target of key {by_target[dst]!r}")
        by_target[dst] = src
        out[src] = dst
    for a in out:
        for b in out:
            if b.startswith(a + "."):
                raise InputError(f"ingest config, field 'field_map', key {b!r}: inside the mapped field {a!r}")
    return out


def _lookup(row: dict[str, Any], src: str) -> tuple[bool, Any]:
    """``(found, value)`` of a source field: the key itself (a CSV column may be named ``a.b``), else the dotted path."""
    if src in row:
        return True, row[src]
    cur: Any = row
    for part in src.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return False, None
        cur = cur[part]
    return True, cur


def _pop(row: dict[str, Any], src: str) -> Any:
    """Remove a found source field from ``row`` (copying the nested objects on its path; emptied ones go too)."""
    if src in row:
        return row.pop(src)
    *parents, leaf = src.split(".")
    path = [row]
    for part in parents:
        path[-1][part] = dict(path[-1][part])
        path.append(path[-1][part])
    value = path[-1].pop(leaf)
    for part, obj, parent in zip(reversed(parents), reversed(path[1:]), reversed(path[:-1])):
        if not obj:
            del parent[part]
    return value


def apply_field_map(raw: dict[str, Any], field_map: dict[str, str], line: int | None = None) -> dict[str, Any]:
    """An export row with the ``field_map`` sources renamed to our fields (a dotted source reads a nested
    field); ``normalize_row`` then applies the aliases and the checks. A mapped source missing in the row
    is a RecordError naming the record and the source. An annotation field goes into the row's nested
    ``annotation`` object when it has one.

    >>> apply_field_map({"uid": "a1", "label": {"first_error": 2, "by": "ann3"}, "meta_info": {"model": "m"}},
    ...                 {"uid": "id", "label.first_error": "first_fatal_error_step", "meta_info.model": "generator"})
    {'label': {'by': 'ann3'}, 'id': 'a1', 'first_fatal_error_step': 2, 'generator': 'm'}
    >>> apply_field_map({"uid": "a1", "label": {}}, {"uid": "id", "label.first_error": "first_fatal_error_step"}, 3)
    Traceback (most recent call last):
    ...
    verifier.records.RecordError: line 3: record 'a1', field 'label.first_error': missing in this record (field_map maps it to 'first_fatal_error_step')
    """
    if not field_map:
        return raw
    id_src = next((src for src, dst in field_map.items() if dst == "id"), None)
    found, rid = _lookup(raw, id_src) if id_src else (True, _guess_id(raw))
    rid = None if not found or rid in (None, "") else str(rid)
    row = dict(raw)
    values: dict[str, tuple[str, Any]] = {}
    for src, dst in field_map.items():
        if not _lookup(row, src)[0]:
            raise RecordError(rid, src, f"missing in this record (field_map maps it to {dst!r})", line)
        values[dst] = (src, _pop(row, src))
    for dst in sorted(values, key=lambda k: k != "annotation"):  # a mapped annotation object first
        src, value = values[dst]
        target = row
        if dst in ANNOTATION_FIELDS and isinstance(row.get("annotation"), dict):
            target = row["annotation"] = dict(row["annotation"])
        if target.get(dst) not in (None, ""):
            raise RecordError(rid, src, f"field_map maps it to {dst!r}, which this record also has", line)
        target[dst] = value
    return row


def step_note(base: int) -> str:
    """How the export counted steps, for the card and ``ingest_summary.json``."""
    return "converted to zero-based on ingest" if base == 1 else "zero-based in the export, stored as is"


def to_zero_based(ann: dict[str, Any], rid: str | None, line: int | None = None) -> dict[str, Any]:
    """The step fields of a 1-based annotation made zero-based (``-1``/none stays ``-1``; 0 is no 1-based step).

    >>> to_zero_based({"first_fatal_error_step": "3", "recoverable_error_steps": "1, 2", "remark": ""}, "p")
    {'first_fatal_error_step': 2, 'recoverable_error_steps': [0, 1], 'remark': ''}
    >>> to_zero_based({"first_fatal_error_step": -1, "recoverable_error_steps": "-1"}, "p")
    {'first_fatal_error_step': -1, 'recoverable_error_steps': []}
    >>> to_zero_based({"first_fatal_error_step": 0}, "p", 7)
    Traceback (most recent call last):
    ...
    verifier.records.RecordError: line 7: record 'p', field 'annotation.first_fatal_error_step': step 0 in a 1-based export (step_index_base=1: the first step is 1; -1 means none)
    """
    out = dict(ann)
    for name in STEP_FIELDS:
        if name not in out:
            continue
        f = f"annotation.{name}"
        try:
            steps = ([parse_step(out[name], rid, f)] if name == "first_fatal_error_step"
                     else parse_step_list(out[name], rid, f))
        except RecordError as e:
            raise RecordError(rid, f, e.message, line) from None
        if 0 in steps:
            raise RecordError(rid, f, "step 0 in a 1-based export (step_index_base=1: the first step is 1; "
                                      "-1 means none)", line)
        steps = [s if s == NO_STEP else s - 1 for s in steps]
        out[name] = steps[0] if name == "first_fatal_error_step" else steps
    return out


def _refuse_label_studio(files: list[Path], cfg: IngestConfig, field_map: dict[str, str]) -> None:
    """A Label Studio export of ``data_pipeline.annotate`` tasks carries our fields and zero-based steps by
    construction (the annotator sees ``Step 0``, ``Step 1``, ...): field_map and step_index_base=1 are refused."""
    for f in files:
        if format_of(f) != "json":
            continue
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            continue  # reported by iter_rows
        if not is_label_studio_export(data):
            continue
        apart = " (ingest it apart from the other exports)" if len(files) > 1 else ""
        if cfg.step_index_base != 0:
            raise InputError(
                f"ingest config, field 'step_index_base': {f} is a Label Studio export of data_pipeline.annotate "
                "tasks, zero-based by construction (the annotator sees the proof as Step 0, Step 1, ...); "
                f"step_index_base={cfg.step_index_base} does not apply to it: ingest it with step_index_base=0{apart}")
        raise InputError(
            f"ingest config, field 'field_map': {f} is a Label Studio export of data_pipeline.annotate tasks, "
            f"whose fields are ours by construction; field_map does not apply to it: ingest it without field_map{apart}")


def input_files(path: str | os.PathLike) -> list[Path]:
    """The export files under ``path`` (a file, or a folder of ``*.jsonl``/``*.csv``/``*.json``)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix.lower() in (".jsonl", ".csv", ".json"))
        if not files:
            raise FileNotFoundError(f"{p}: no *.jsonl, *.csv or *.json files in this folder")
        return files
    if format_of(p) not in EXPORT_FORMATS:
        raise InputError(f"{p}: expected a .jsonl, .csv or .json file (got {p.suffix!r})")
    return [p]


def iter_rows(path: Path) -> Iterator[tuple[int, Any, bool]]:
    """``(line, row or RecordError, from_csv)`` for each row of a JSONL or CSV export."""
    kind = format_of(path)
    if kind == "csv":
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames:
                return
            while True:
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except csv.Error as e:
                    yield reader.line_num, RecordError(None, "<csv>", f"malformed CSV: {e}", reader.line_num), True
                    return
                yield reader.line_num, row, True
    elif kind == "json":  # one JSON array of records
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            yield e.lineno, RecordError(None, "<json>", f"invalid JSON: {e.msg}", e.lineno), False
            return
        if not isinstance(data, list):
            yield 1, RecordError(None, "<json>", "expected a JSON array of records", 1), False
            return
        if is_label_studio_export(data):  # Label Studio JSON export of data_pipeline.annotate tasks
            for i, task in enumerate(data, 1):
                try:
                    yield i, task_to_record(task, i), False
                except RecordError as e:
                    yield i, e, False
            return
        for i, obj in enumerate(data, 1):
            yield i, obj, False  # "line" = position in the array
    else:
        for n, obj in iter_jsonl(path):
            yield n, obj, False


def ingest(cfg: IngestConfig) -> IngestResult:
    """Validate every record of the export(s); collect ALL errors (id, field, line)."""
    if not cfg.input:
        raise InputError("ingest config, field 'input': a JSONL/CSV export (or folder) is required")
    if cfg.on_error not in ("raise", "skip"):
        raise InputError(f"ingest config, field 'on_error': use raise or skip, got {cfg.on_error!r}")
    if cfg.extra_columns not in ("meta", "error"):
        raise InputError(f"ingest config, field 'extra_columns': use meta or error, got {cfg.extra_columns!r}")
    if isinstance(cfg.step_index_base, bool) or cfg.step_index_base not in (0, 1):
        raise InputError("ingest config, field 'step_index_base': use 0 (zero-based steps, ours) or 1 (the export "
                         f"counts steps from 1; converted on ingest), got {cfg.step_index_base!r}")
    field_map = check_field_map(cfg.field_map)

    files = input_files(cfg.input)
    if field_map or cfg.step_index_base:
        _refuse_label_studio(files, cfg, field_map)
    result = IngestResult(records=[], inputs=[str(f) for f in files], field_map=field_map,
                          step_index_base=cfg.step_index_base)
    seen: dict[str, str] = {}
    extra: set[str] = set()
    multi = len(files) > 1
    for path in files:
        for line, obj, from_csv in tqdm(iter_rows(path), desc=f"ingest {path.name}", unit="row",
                                        disable=not cfg.progress):
            result.n_rows += 1
            where = f"{path.name}:{line}" if multi else f"line {line}"
            try:
                if isinstance(obj, RecordError):
                    raise obj
                if not isinstance(obj, dict):
                    raise RecordError(None, "<record>", f"expected an object, got {type(obj).__name__}", line)
                row, unknown = normalize_row(apply_field_map(obj, field_map, line), line, from_csv, cfg.extra_columns)
                extra.update(unknown)
                if cfg.step_index_base == 1 and isinstance(row.get("annotation"), dict):
                    rid = None if row.get("id") in (None, "") else str(row["id"]).strip()
                    row["annotation"] = to_zero_based(row["annotation"], rid, line)
                rec = _from_dict(row, line, cfg.step_index_base)
                if rec.annotation is None and cfg.require_annotation:
                    raise RecordError(rec.id, "annotation", "missing (no annotation fields in this record)", line)
                if rec.id in seen:
                    raise RecordError(rec.id, "id", f"duplicate id (first seen at {seen[rec.id]})", line)
            except RecordError as e:
                if multi:
                    e = RecordError(e.record_id, e.field, f"{path.name}: {e.message}", e.line)
                result.errors.append(e)
                continue
            seen[rec.id] = where
            if rec.annotation is not None and rec.annotation.report_error_case:
                result.excluded.append(rec)
            else:
                result.records.append(rec)
    result.extra_columns = sorted(extra)
    return result


def _from_dict(row: dict[str, Any], line: int | None, base: int) -> ProofTrajectory:
    """``ProofTrajectory.from_dict``; a step error of a converted export says the steps are zero-based now."""
    try:
        return ProofTrajectory.from_dict(row, line=line)
    except RecordError as e:
        if base == 1 and e.field in tuple(f"annotation.{n}" for n in STEP_FIELDS):
            raise RecordError(e.record_id, e.field, f"{e.message} (zero-based: converted from the export's "
                              "1-based steps, step_index_base=1)", e.line) from None
        raise


# ------------------------------------------------------------------------------------------ output


def counts(records: list[ProofTrajectory]) -> dict[str, dict[str, int]]:
    """Counts by polarity, split, subject, source, annotator (empty values shown as ``(none)``)."""
    def c(values) -> dict[str, int]:
        return dict(sorted(Counter(v or "(none)" for v in values).items()))

    return {
        "polarity": c(t.gold_verdict.value if t.gold_verdict else "unannotated" for t in records),
        "fully_correct": c("yes" if t.annotation and t.annotation.fully_correct else "no" for t in records),
        "split": c(t.split for t in records),
        "subject": c(t.subject for t in records),
        "source": c(t.source for t in records),
        "annotator": c(annotator(t) for t in records),
    }


def annotator(t: ProofTrajectory) -> str:
    """Who annotated a record: ``simulated: <name>`` (``data_pipeline.simulated_expert``), ``label studio`` (a human
    Label Studio export) or ``(none)`` (another export; the field is not recorded)."""
    ls = (t.meta or {}).get("label_studio") or {}
    return f"simulated: {ls['simulated_by']}" if ls.get("simulated_by") else "label studio" if ls else ""


def _table(title: str, d: dict[str, int]) -> str:
    rows = "\n".join(f"| {k} | {v} |" for k, v in d.items()) or "| (none) | 0 |"
    return f"### {title}\n\n| value | records |\n|---|---|\n{rows}\n"


def dataset_card(result: IngestResult, cfg: IngestConfig) -> str:
    """The dataset card (``README.md``): provenance and counts by polarity, split, subject, source."""
    s = result.summary()
    errs = "".join(f"- {e}\n" for e in result.errors[:200])
    if len(result.errors) > 200:
        errs += f"- ... and {len(result.errors) - 200} more (errors.jsonl)\n"
    exc = "".join(f"- `{t.id}`: {t.annotation.remark}\n" for t in result.excluded[:200])
    return (
        "---\n"
        f"pretty_name: {cfg.name}\n"
        "configs:\n- config_name: default\n  data_files: data.parquet\n"
        "---\n\n"
        f"# {cfg.name}\n\n"
        "Expert-annotated proof trajectories (AdvancedMathBench appendix C fields), validated by\n"
        "`python -m data_pipeline.ingest`. Step indices are zero-based; `-1` means none. A proof is\n"
        "valid iff it has no fatal error; fully correct iff it has no recoverable error either.\n\n"
        f"Inputs: {', '.join(f'`{i}`' for i in result.inputs)}\n\n"
        f"- step_index_base: {result.step_index_base} ({step_note(result.step_index_base)})\n"
        f"- field_map: {', '.join(f'`{k}` -> `{v}`' for k, v in result.field_map.items()) or 'none'}\n\n"
        "## Counts\n\n"
        f"- rows read: {s['rows']}\n- kept: {s['kept']}\n"
        f"- excluded (report_error_case, kept in `excluded.jsonl`): {s['excluded_report_error_case']}\n"
        f"- rejected (bad records, see `errors.txt`): {s['rejected']}\n"
        f"- extra columns kept in `meta.extra`: {', '.join(s['extra_columns']) or 'none'}\n\n"
        + _table("Polarity", s["polarity"]) + "\n" + _table("Fully correct", s["fully_correct"]) + "\n"
        + _table("Split", s["split"]) + "\n" + _table("Subject", s["subject"]) + "\n" + _table("Source", s["source"])
        + "\n" + _table("Annotator (simulated: the exact checker of data_pipeline.simulated_expert)", s["annotator"])
        + "\n## Files\n\n- `dataset/`: Hugging Face `save_to_disk` (Arrow)\n- `data.parquet`: the same rows\n"
        "- `trajectories.jsonl`: our trajectory JSONL (annotation nested)\n"
        "- `excluded.jsonl`: report_error_case records\n- `errors.txt`, `errors.jsonl`: rejected records\n"
        + ("\n## Rejected records\n\n" + errs if result.errors else "")
        + ("\n## Excluded (report_error_case)\n\n" + exc if result.excluded else "")
    )


def write_error_report(errors: list[RecordError], out: Path, source: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "errors.txt").write_text(str(DatasetError(source, errors)) + "\n" if errors else "no errors\n",
                                    encoding="utf-8")
    write_jsonl(out / "errors.jsonl", ({"id": e.record_id, "field": e.field, "line": e.line, "message": e.message}
                                       for e in errors))


def write_outputs(result: IngestResult, cfg: IngestConfig) -> Path:
    """Write dataset (Arrow + Parquet), JSONL, exclusions, error report and the card."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    ds = to_dataset(result.records)
    ds.save_to_disk(str(out / "dataset"))
    ds.to_parquet(str(out / "data.parquet"))
    write_jsonl(out / "trajectories.jsonl", result.records)
    write_jsonl(out / "excluded.jsonl", result.excluded)
    write_error_report(result.errors, out, cfg.input or "")
    (out / "ingest_summary.json").write_text(json.dumps(result.summary(), indent=1) + "\n", encoding="utf-8")
    (out / "README.md").write_text(dataset_card(result, cfg), encoding="utf-8")
    return out


def run(cfg: IngestConfig) -> IngestResult:
    """Ingest and write; raises ``DatasetError`` (all bad records) when ``on_error=raise``."""
    if not cfg.out:
        raise InputError("ingest config, field 'out': an output folder is required (out=DIR)")
    result = ingest(cfg)
    if result.errors and cfg.on_error == "raise":
        write_error_report(result.errors, Path(cfg.out), cfg.input or "")
        raise DatasetError(cfg.input or "", result.errors)
    write_outputs(result, cfg)
    return result


def summary_line(result: Any, out: Any) -> str:
    """The line ``ingest`` and ``annotate import`` print when they are done."""
    s = result.summary()
    return (f"ingested {s['kept']} records (excluded report_error_case={s['excluded_report_error_case']}, "
            f"rejected={s['rejected']}; polarity {s['polarity']}) to {out}")


def main() -> None:
    """Hydra app: ``python -m data_pipeline.ingest input=PATH out=DIR``."""

    @hydra_main("ingest", IngestConfig)
    def _run(cfg: IngestConfig) -> None:
        try:
            r = run(cfg)
        except DatasetError as e:
            print(f"ingest failed: {e}\n(error report: {Path(cfg.out) / 'errors.txt'}; "
                  "use on_error=skip to write the good records)", file=sys.stderr)
            raise SystemExit(EXIT_USER_ERROR) from None
        print(summary_line(r, cfg.out))

    _run()


if __name__ == "__main__":
    main()
