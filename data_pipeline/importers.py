"""Importers of public proof-verification sets into our records.

* ProcessBench (Zheng et al., 2024; Apache-2.0): ``label`` is the first erroneous
  step (zero-based), -1 when the solution is correct. The first error is taken as
  the first fatal error; ProcessBench has no recoverable-error labels.
* Open Proof Corpus test split (Dekoninck et al., 2025): the human verdict is
  ``reward_model.ground_truth``; human span comments become the reviewer comment
  (each tagged with the step it falls in). ``llm_judgment`` is an LLM's output and
  is never used as gold. The fatal step is not located (``fatal_step_unknown``).
* Our own trajectory JSONL.
* Proof *problems* (no proofs) for ProverBench runs: IMO-ProofBench v2 CSV or a JSONL of
  problems (``load_proofbench_problems``).

``problem_id`` of imported records is ``problem_id_of(problem)`` (a hash of the normalised
problem text), shared across sets; OPC's own id is kept in ``meta["source_problem_id"]``.

``load_any(path)`` picks the importer from the file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifier.io import LoadResult, iter_jsonl, load_trajectories, note_derived_ids
from verifier.records import NO_STEP, Annotation, ProofTrajectory, RecordError, problem_id_of

SHARED_DATA = Path(os.environ.get("VERIFIER_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))


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
    import bisect

    import pandas as pd

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


def load_any(path: str | os.PathLike, on_error: str = "raise") -> LoadResult:
    """Load trajectories from our JSONL, a ProcessBench split (.json) or the OPC parquet."""
    p = Path(path)
    if p.suffix == ".parquet":
        return LoadResult(load_opc(p))
    if p.suffix == ".json":
        return LoadResult(load_processbench(p))
    return load_trajectories(p, on_error=on_error)  # type: ignore[arg-type]


def gold_summary(records: list[ProofTrajectory]) -> dict[str, Any]:
    """Counts by gold polarity."""
    valid = sum(1 for r in records if r.annotation is not None and r.annotation.is_valid)
    invalid = sum(1 for r in records if r.annotation is not None and not r.annotation.is_valid)
    return {"n": len(records), "valid": valid, "invalid": invalid,
            "unannotated": len(records) - valid - invalid}


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
    if p.suffix == ".csv":
        import pandas as pd

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
