"""Every file format of records in and out, with one dispatch (``format_of``).

* Our trajectory JSONL (``verifier.io``: validated, torn-line repair on append).
* ProcessBench (Zheng et al., 2024; Apache-2.0; one ``.json`` per split): ``label`` is the first
  erroneous step (zero-based), -1 when the solution is correct. The first error is taken as the
  first fatal error; ProcessBench has no recoverable-error labels.
* Open Proof Corpus test split (Dekoninck et al., 2025; ``.parquet`` with ``prompt`` and
  ``reward_model`` columns): the human verdict is ``reward_model.ground_truth``; human span comments
  become the reviewer comment (each tagged with the step it falls in). ``llm_judgment`` is an LLM's
  output and is never used as gold. The fatal step is not located (``fatal_step_unknown``).
* Ingested sets (``data_pipeline.ingest``'s output): a folder (``trajectories.jsonl``, ``dataset/``
  Arrow) or its ``data.parquet`` (``INGESTED_COLUMNS``: the annotation flattened, meta as JSON text).
* Label Studio JSON exports of the tasks ``data_pipeline.annotate export`` writes (``task_to_record``).
* Proof *problems* (no proofs) for ProverBench runs: the IMO-ProofBench v2 CSV or a JSONL of problems
  (``load_proofbench_problems``).

A ``.parquet`` is told by its columns (OPC or an ingested set; anything else is an error naming the
file). ``problem_id`` of imported records is ``verifier.identity.problem_id_of(problem)``, shared across
sets; OPC's own id is kept in ``meta["source_problem_id"]``. ``load_any(path)`` reads any trajectory
format (or a folder of them), ``load_gold`` the same with every record annotated.
"""

from __future__ import annotations

import bisect
import dataclasses
import errno
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from verifier.errors import InputError
from verifier.identity import problem_id_of
from verifier.io import DatasetError, LoadResult, iter_jsonl, load_trajectories, note_derived_ids
from verifier.records import NO_STEP, Annotation, ProofTrajectory, RecordError, check_unique_ids

SHARED_DATA = Path(os.environ.get("VERIFIER_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))

# ------------------------------------------------------------------------------------------ dispatch

OPC_COLUMNS = frozenset({"prompt", "reward_model"})
INGESTED_COLUMNS = ("id", "problem_id", "problem", "proof_steps", "reference_solution", "subject", "split", "source",
                    "generator", "annotated", "polarity", "fully_correct", "reviewer_comment", "first_fatal_error_step",
                    "recoverable_error_steps", "remark", "report_error_case", "correction", "fatal_step_unknown", "meta")
RECORD_SUFFIXES = (".jsonl", ".json", ".parquet")  # what a folder given to load_any contributes


def format_of(path: str | os.PathLike) -> str:
    """The one suffix dispatch: ``jsonl`` | ``json`` | ``csv`` | ``opc`` | ``ingested`` | ``folder``.

    ``.json`` is a JSON array (ProcessBench for ``load_any``; export rows or a Label Studio export for
    ingestion); ``.parquet`` is ``opc`` or ``ingested`` by its columns; a folder is ``ingested`` when it
    holds ``trajectories.jsonl`` or a saved dataset, else ``folder`` (every record file in it).
    """
    p = Path(path)
    if p.is_dir():
        if (p / "trajectories.jsonl").exists() or (p / "dataset").is_dir() or (p / "dataset_info.json").exists():
            return "ingested"
        return "folder"
    if not p.exists():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(p))
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".json", ".csv"):
        return suffix[1:]
    if suffix == ".parquet":
        cols = set(pq.read_schema(p).names)
        if OPC_COLUMNS <= cols:
            return "opc"
        if set(INGESTED_COLUMNS) <= cols:
            return "ingested"
        raise InputError(f"{p}: a .parquet is read as the OPC test split (columns {sorted(OPC_COLUMNS)}) or an "
                         f"ingested set (columns {list(INGESTED_COLUMNS)}); this one has {sorted(cols)}")
    raise InputError(f"{p}: unknown format {p.suffix!r}; expected .jsonl, .json, .csv, .parquet or a folder")


def load_any(path: str | os.PathLike, on_error: str = "raise") -> LoadResult:
    """Trajectories from our JSONL, a ProcessBench split (.json), the OPC parquet, an ingested set
    (folder or ``data.parquet``) or a folder of such files (ids unique across them)."""
    p = Path(path)
    kind = format_of(p)
    if kind == "jsonl":
        return load_trajectories(p, on_error=on_error)  # type: ignore[arg-type]
    if kind == "json":
        return LoadResult(load_processbench(p))
    if kind == "opc":
        return LoadResult(load_opc(p))
    if kind == "ingested":
        return LoadResult(_load_ingested(p))
    if kind == "folder":
        files = sorted(f for f in p.iterdir() if f.suffix.lower() in RECORD_SUFFIXES)
        if not files:
            raise FileNotFoundError(f"{p}: no {', '.join(RECORD_SUFFIXES)} file in this folder")
        parts = [load_any(f, on_error) for f in files]
        result = LoadResult([r for part in parts for r in part.records], [e for part in parts for e in part.errors],
                            sum(part.derived_problem_ids for part in parts))
        check_unique_ids(result.records)
        return result
    raise InputError(f"{p}: a {kind} file holds annotation exports or problems, not trajectories "
                     "(ingest it first: python -m data_pipeline.ingest input=PATH out=DIR)")


def load_gold(path: str | os.PathLike, annotated: bool = True) -> list[ProofTrajectory]:
    """Gold records (``load_any``: a file or a folder of them), ids unique; with ``annotated`` every record
    must carry an expert annotation (a ``DatasetError`` lists those that do not)."""
    records = load_any(path).records
    check_unique_ids(records)
    if annotated:
        bad = [RecordError(r.id, "annotation", "gold record has no expert annotation") for r in records
               if r.annotation is None]
        if bad:
            raise DatasetError(path, bad)
    return records


def gold_summary(records: list[ProofTrajectory]) -> dict[str, Any]:
    """Counts by gold polarity."""
    valid = sum(1 for r in records if r.annotation is not None and r.annotation.is_valid)
    invalid = sum(1 for r in records if r.annotation is not None and not r.annotation.is_valid)
    return {"n": len(records), "valid": valid, "invalid": invalid,
            "unannotated": len(records) - valid - invalid}


# ------------------------------------------------------------------------------------------ ProcessBench, OPC


def load_processbench(path: str | os.PathLike) -> list[ProofTrajectory]:
    """One ProcessBench split file (``gsm8k.json``, ``math.json``, ...) as annotated trajectories."""
    path = Path(path)
    split = path.stem
    rows = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for i, r in enumerate(rows):
        rid = str(r.get("id", f"{split}-{i}"))
        steps = r.get("steps")
        if not isinstance(steps, list) or not steps:
            raise RecordError(rid, "steps", "expected a non-empty list")
        label = r.get("label")
        if not isinstance(label, int) or label < NO_STEP or label >= len(steps):
            raise RecordError(rid, "label", f"expected -1 or a step index < {len(steps)}, got {label!r}")
        if not isinstance(r.get("problem"), str) or not r["problem"].strip():
            raise RecordError(rid, "problem", "expected a non-empty string")
        out.append(ProofTrajectory(
            id=rid,
            problem_id=problem_id_of(r["problem"]),
            problem=r["problem"],
            proof_steps=tuple(steps),
            split=split,
            source=f"processbench/{split}",
            generator=r.get("generator", ""),
            annotation=Annotation(first_fatal_error_step=label),
            meta={"final_answer_correct": r.get("final_answer_correct")},
        ))
    return out


def _opc_problem_and_proof(prompt: str, rid: str) -> tuple[str, str]:
    m_p = prompt.rfind("### Problem Statement:")
    m_s = prompt.rfind("### Model Solution:")
    if m_p < 0 or m_s < 0 or m_s < m_p:
        raise RecordError(rid, "prompt", "cannot find the problem statement and the model solution")
    problem = prompt[m_p + len("### Problem Statement:"): m_s].strip()
    proof = prompt[m_s + len("### Model Solution:"):].strip()
    return problem, proof


def split_paragraphs(text: str) -> tuple[list[str], list[int]]:
    """Paragraph steps and their start offsets in ``text``."""
    steps, starts = [], []
    for m in re.finditer(r"(?:[^\n]|\n(?!\s*\n))+", text):
        if m.group().strip():
            steps.append(m.group().strip())
            starts.append(m.start())
    return steps, starts


def load_opc(path: str | os.PathLike) -> list[ProofTrajectory]:
    """The OPC test parquet (434 proofs) as trajectories with human binary verdicts."""
    df = pd.read_parquet(path)
    out = []
    for i, r in df.iterrows():
        rid = f"opc-{r['extra_info']['index'] if isinstance(r.get('extra_info'), dict) else i}"
        gt = (r["reward_model"] or {}).get("ground_truth")
        if gt not in ("correct", "incorrect"):
            raise RecordError(rid, "reward_model.ground_truth", f"expected correct/incorrect, got {gt!r}")
        problem, proof = _opc_problem_and_proof(r["prompt"][0]["content"], rid)
        steps, starts = split_paragraphs(proof)
        comments = []
        ann = r.get("annotations")
        if ann is not None and len(ann):
            for a in ann:
                idx = a.get("original_text_indices")
                step = bisect.bisect_right(starts, int(idx[0])) - 1 if idx is not None and len(idx) else None
                tag = f"[step {step}] " if step is not None and step >= 0 else ""
                comments.append(tag + str(a.get("comment", "")).strip())
        ref = ""
        for s in r["solutions"] if r.get("solutions") is not None else []:
            if s.get("author") == "Human":
                ref = s.get("solution") or ""
                break
        meta = r.get("metadata") or {}
        cats = meta.get("category")
        subject = ", ".join(c.strip() for c in cats) if cats is not None else ""
        out.append(ProofTrajectory(
            id=rid,
            problem_id=problem_id_of(problem),
            problem=problem,
            proof_steps=tuple(steps) or (proof,),
            reference_solution=ref,
            subject=subject,
            split=str(meta.get("competition", "")),
            source="opc/test",
            generator=str(r.get("model_id", "")),
            annotation=Annotation(reviewer_comment="\n".join(comments), fatal_step_unknown=(gt == "incorrect")),
            meta={"source_problem_id": str(r["problem_id"])},
        ))
    return out


# ------------------------------------------------------------------------------------------ ingested sets


def dataset_row(t: ProofTrajectory) -> dict[str, Any]:
    """Flat dataset columns of one record (``INGESTED_COLUMNS``: the annotation flattened; meta as JSON text)."""
    a = t.annotation or Annotation()
    return {
        "id": t.id, "problem_id": t.problem_id, "problem": t.problem, "proof_steps": list(t.proof_steps),
        "reference_solution": t.reference_solution, "subject": t.subject, "split": t.split, "source": t.source,
        "generator": t.generator, "annotated": t.annotation is not None,
        "polarity": t.gold_verdict.value if t.gold_verdict else "", "fully_correct": bool(t.annotation and a.fully_correct),
        "reviewer_comment": a.reviewer_comment, "first_fatal_error_step": a.first_fatal_error_step,
        "recoverable_error_steps": list(a.recoverable_error_steps), "remark": a.remark,
        "report_error_case": a.report_error_case, "correction": a.correction, "fatal_step_unknown": a.fatal_step_unknown,
        "meta": json.dumps(t.meta, ensure_ascii=False, sort_keys=True),
    }


def trajectory_from_dataset_row(row: dict[str, Any]) -> ProofTrajectory:
    """Inverse of ``dataset_row``."""
    d = {k: row[k] for k in ("id", "problem_id", "problem", "proof_steps", "reference_solution", "subject", "split",
                             "source", "generator")}
    if row.get("annotated", True):
        d["annotation"] = {f.name: row[f.name] for f in dataclasses.fields(Annotation)}
    d["meta"] = json.loads(row.get("meta") or "{}")
    return ProofTrajectory.from_dict(d)


def features():
    """The ``datasets.Features`` of ``INGESTED_COLUMNS``."""
    # datasets (pyarrow tables, ~2 s import): ingested sets only
    from datasets import Features, Sequence, Value

    s, i, b = Value("string"), Value("int64"), Value("bool")
    kinds = {"proof_steps": Sequence(s), "recoverable_error_steps": Sequence(i), "first_fatal_error_step": i,
             "annotated": b, "fully_correct": b, "report_error_case": b, "fatal_step_unknown": b}
    return Features({k: kinds.get(k, s) for k in INGESTED_COLUMNS})


def to_dataset(records: list[ProofTrajectory]):
    """A ``datasets.Dataset`` with fixed features (also for an empty list)."""
    from datasets import Dataset  # see features()

    rows = [dataset_row(t) for t in records]
    return Dataset.from_dict({k: [r[k] for r in rows] for k in INGESTED_COLUMNS}, features=features())


def _load_ingested(path: str | os.PathLike) -> list[ProofTrajectory]:
    """Records of an ingested set: its folder (``trajectories.jsonl``, else ``dataset/``), a saved dataset
    folder or its ``data.parquet``."""
    from datasets import Dataset, load_from_disk  # see features()

    p = Path(path)
    if p.is_dir() and (p / "trajectories.jsonl").exists():
        return load_trajectories(p / "trajectories.jsonl").records
    if p.suffix.lower() == ".parquet":
        ds = Dataset.from_parquet(str(p))
    else:
        ds = load_from_disk(str(p / "dataset" if (p / "dataset").is_dir() else p))
    return [trajectory_from_dataset_row(r) for r in ds]


# ------------------------------------------------------------------------------------------ Label Studio

REPORT_CHOICE = "Report error case"
# control name of data_pipeline.annotate's labeling config -> (annotation field, Label Studio result type)
CONTROLS = {
    "reviewer_comment": ("reviewer_comment", "textarea"),
    "first_fatal_error_step": ("first_fatal_error_step", "number"),
    "recoverable_error_steps": ("recoverable_error_steps", "textarea"),
    "remark": ("remark", "textarea"),
    "report_error_case": ("report_error_case", "choices"),
    "correction": ("correction", "textarea"),
}


def is_label_studio_export(data: Any) -> bool:
    """A Label Studio JSON export: a list of tasks with ``data`` and ``annotations``."""
    return (isinstance(data, list) and bool(data) and isinstance(data[0], dict)
            and "data" in data[0] and "annotations" in data[0])


def _value(item: dict[str, Any], kind: str, rid: str, name: str) -> Any:
    value = item.get("value") or {}
    if kind == "textarea":
        text = value.get("text", [])
        if isinstance(text, str):
            text = [text]
        if not isinstance(text, list) or not all(isinstance(t, str) for t in text):
            raise RecordError(rid, f"annotation.{name}", f"expected text, got {value!r}")
        return "\n".join(text)
    if kind == "number":
        return value.get("number")
    return value.get("choices", [])


def task_to_record(task: dict[str, Any], line: int | None = None) -> dict[str, Any]:
    """One exported task -> our trajectory record (annotation nested); C.5 checked, errors name the task."""
    tid = task.get("id")
    data = task.get("data") or {}
    traj = data.get("trajectory")
    rid = f"{data.get('trajectory_id', '?')} (Label Studio task {tid})"
    if not isinstance(traj, dict):
        raise RecordError(rid, "data.trajectory", "missing: not a task written by data_pipeline.annotate export", line)
    anns = [a for a in task.get("annotations") or [] if not a.get("was_cancelled")]
    if not anns:
        why = "skipped by the annotator" if task.get("annotations") else "no submitted annotation"
        raise RecordError(rid, "annotations", why, line)
    ann = max(anns, key=lambda a: (str(a.get("updated_at") or a.get("created_at") or ""), a.get("id") or 0))
    fields: dict[str, Any] = {}
    for item in ann.get("result") or []:
        name = item.get("from_name")
        if name not in CONTROLS:
            raise RecordError(rid, f"result.{name}", "unknown control (not in our labeling config)", line)
        field_name, kind = CONTROLS[name]
        v = _value(item, kind, rid, field_name)
        fields[field_name] = (REPORT_CHOICE in v) if name == "report_error_case" else v
    fields["report_error_case"] = bool(fields.get("report_error_case", False))
    n_steps = len(traj.get("proof_steps") or [])
    try:
        if fields.get("first_fatal_error_step") is None:
            if not fields["report_error_case"]:
                raise RecordError(rid, "annotation.first_fatal_error_step",
                                  "missing (enter -1 when the proof has no fatal error)")
            fields["first_fatal_error_step"] = NO_STEP
        a = Annotation.from_dict(fields, rid, n_steps=n_steps)
    except RecordError as e:
        raise RecordError(rid, e.field, e.message, line) from None
    meta = dict(traj.get("meta") or {})
    meta["label_studio"] = {"task_id": tid, "annotation_id": ann.get("id"), "completed_by": ann.get("completed_by"),
                            "annotations": len(anns), "updated_at": ann.get("updated_at")}
    if ann.get("simulated_by"):  # data_pipeline.simulated_expert: not a human annotation (counted in the card)
        meta["label_studio"]["simulated_by"] = str(ann["simulated_by"])
    return {**traj, "annotation": a.to_dict(), "meta": meta}


# ------------------------------------------------------------------------------------------ problems


@dataclass(frozen=True)
class ProofProblem:
    """One proof problem of a ProverBench-style set (section 5.2): no proof yet, maybe a reference."""

    id: str
    problem: str
    reference_solution: str = ""
    split: str = ""
    subject: str = ""
    grading_guidelines: str = ""
    source: str = ""


_PROBLEM_KEYS = {"id", "problem_id", "problem", "reference_solution", "solution", "split", "subject",
                 "grading_guidelines", "source"}


def load_proofbench_problems(path: str | os.PathLike) -> list[ProofProblem]:
    """Problems for ``eval.proverbench``: the IMO-ProofBench v2 CSV or any JSONL of problems.

    IMO-ProofBench v2 (Luong et al., 2025; CC-BY-4.0; ``proofbench_v2.csv``): ``Problem ID``,
    ``Problem``, ``Solution`` (the reference), ``Grading guidelines``, ``Category`` as subject,
    ``Level`` as split. JSONL: ``id`` (or ``problem_id``), ``problem``, optional
    ``reference_solution`` (or ``solution``), ``split``, ``subject``, ``grading_guidelines``,
    ``source``; without an id, ``problem_id_of(problem)``. Errors name the record and the field;
    duplicate ids are errors.
    """
    p = Path(path)
    rows: list[tuple[int | None, dict[str, Any]]] = []
    if format_of(p) == "csv":
        df = pd.read_csv(p, dtype=str, keep_default_na=False)
        need = {"Problem ID", "Problem", "Solution", "Category", "Level"}
        if not need <= set(df.columns):
            raise RecordError(None, "<columns>", f"{p}: expected columns {sorted(need)}, got {list(df.columns)}")
        for i, r in df.iterrows():
            rows.append((int(i) + 2, {"id": r["Problem ID"], "problem": r["Problem"], "reference_solution": r["Solution"],
                                      "split": r["Level"], "subject": r["Category"],
                                      "grading_guidelines": r.get("Grading guidelines", ""),
                                      "source": r.get("Source", "") or "imo-proofbench-v2"}))
    else:
        for n, obj in iter_jsonl(p):
            if isinstance(obj, RecordError):
                raise obj
            if not isinstance(obj, dict):
                raise RecordError(None, "<record>", f"expected a JSON object, got {type(obj).__name__}", n)
            rows.append((n, obj))
    out: list[ProofProblem] = []
    seen: set[str] = set()
    derived = 0
    for line, d in rows:
        rid = d.get("id", d.get("problem_id"))
        if (rid is None or str(rid).strip() == "") and isinstance(d.get("problem"), str) and d["problem"].strip():
            rid, derived = problem_id_of(d["problem"]), derived + 1  # the id the leak checks use
        if rid is None or str(rid).strip() == "":
            raise RecordError(None, "id", "missing", line)
        rid = str(rid)
        unknown = set(d) - _PROBLEM_KEYS
        if unknown:
            raise RecordError(rid, sorted(unknown)[0], "unknown field", line)
        if rid in seen:
            raise RecordError(rid, "id", "duplicate id", line)
        seen.add(rid)
        vals = {}
        for k in ("problem", "reference_solution", "split", "subject", "grading_guidelines", "source"):
            v = d.get(k, d.get("solution") if k == "reference_solution" else None)
            if v is not None and not isinstance(v, str):
                raise RecordError(rid, k, f"expected a string, got {type(v).__name__}", line)
            vals[k] = (v or "").strip()
        if not vals["problem"]:
            raise RecordError(rid, "problem", "missing (empty)", line)
        out.append(ProofProblem(id=rid, **vals))
    note_derived_ids(p, derived)
    return out
