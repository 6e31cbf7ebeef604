"""A simulated expert annotator for the synthetic task, through the real annotation path (appendix C, section 4.1).

``python -m data_pipeline.simulated_expert tasks=DIR/tasks.json out=DIR budget=K``

On the synthetic task every proof's truth is known exactly (``data_pipeline.synthetic_check``), so an exact
checker can stand in for the human expert of appendix C and the data stages can be measured on proofs a prover
wrote. It reads the Label Studio tasks that ``data_pipeline.annotate export`` wrote for an annotation queue (in
queue order: the most uncertain first) and writes, for the first ``budget`` of them, the appendix-C annotation an
expert would submit — first fatal error step, recoverable error steps (notation slips before it), a reviewer
comment that names the step and what is wrong, a correction suggestion — as a **Label Studio JSON export**
(``export.json``: tasks with ``annotations[].result`` items of our labeling config's controls). That file is
ingested exactly as a human export is (``python -m data_pipeline.ingest input=DIR/export.json out=...``: same
validation, same dataset card, same provenance fields); each annotation says ``simulated_by`` (kept by the export
parser in ``meta.label_studio.simulated_by`` and counted in the dataset card), and nothing else reaches training:
the simulated expert is a backend a user swaps for a real Label Studio export.

The budget is in proofs annotated; ``simulated_expert_summary.json`` counts what was spent, what was left over
(queued proofs beyond the budget, not written), and the verdicts and error kinds annotated. A task whose problem
is not a synthetic problem, or a proof without steps, is reported as an error case (``report_error_case`` with a
remark), as an expert flags an abnormal case (appendix C.4); ingest keeps it apart in ``excluded.jsonl``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from data_pipeline.synthetic_check import Check, check_proof
from verifier.config import hydra_main
from verifier.errors import InputError
from verifier.formats import REPORT_CHOICE
from verifier.records import NO_STEP, Annotation

SIMULATED_BY = "exact-checker (data_pipeline.synthetic_check)"
_KIND_WORDS = {
    "wrong_result": "a wrong operation result", "wrong_operand": "a result carried wrongly (it does not start from "
    "the previous result)", "wrong_operation": "an operation the problem does not have",
    "skipped_step": "an operation of the problem is skipped", "extra_step": "a step the problem does not call for",
    "wrong_final": "the stated answer is not the last result", "malformed_step": "a step that is not a computation",
}


@dataclass
class SimulatedExpertConfig:
    """Options of ``python -m data_pipeline.simulated_expert`` (mirrored by ``configs/simulated_expert.yaml``)."""

    tasks: str | None = None  # tasks.json of ``data_pipeline.annotate export`` (queue order)
    out: str | None = None  # writes export.json and simulated_expert_summary.json
    budget: int = 100  # proofs annotated at most (the first ``budget`` tasks in queue order)
    annotator: str = SIMULATED_BY  # the name written as ``simulated_by`` in each annotation


def expert_annotation(problem: str, steps: Sequence[str]) -> tuple[Annotation, Check]:
    """The appendix-C annotation an expert writes for a proof of a synthetic problem, from the exact checker.

    >>> a, c = expert_annotation("Compute 5 + 3 - 2.", ["5 + 3 = 8", "8 - 2 = 7", "So the answer is 7."])
    >>> a.first_fatal_error_step, c.kind, a.correction
    (1, 'wrong_result', "Step 1 should read '8 - 2 = 6'; redo every later step from there.")
    >>> expert_annotation("Compute 5 + 3.", ["5 + 3 == 8", "So the answer is 8."])[0].recoverable_error_steps
    (0,)
    """
    c = check_proof(problem, steps)
    slips = [f"Step {s} writes {steps[s].split()[3]!r} instead of '='; a recoverable notation slip that keeps the "
             "value." for s in c.recoverable]
    fixes = [f"In step {s} write '=' instead of {steps[s].split()[3]!r}." for s in c.recoverable]
    if c.true:
        comment = " ".join(["Every step starts from the previous result, applies the problem's operation and is "
                            "computed correctly, and the answer step states the final value: the proof is valid.",
                            *slips])
        return Annotation(reviewer_comment=comment, recoverable_error_steps=c.recoverable,
                          correction=" ".join(fixes)), c
    if c.kind == "not_a_problem":
        return Annotation(report_error_case=True, remark=f"not a synthetic problem: {c.reason}",
                          reviewer_comment="The problem statement is not one of the task's problems."), c
    if c.step == NO_STEP:  # an empty proof: no step to name (the labeling config has no "step unknown" control)
        return Annotation(report_error_case=True, remark=f"abnormal case: {c.reason}",
                          reviewer_comment=f"The proof is invalid: {c.reason}."), c
    before = f"Steps 0-{c.step - 1} are correct. " if c.step > 1 else "Step 0 is correct. " if c.step == 1 else ""
    what = c.reason.partition(": ")[2] or c.reason  # the checker's reason without its "step k" prefix
    comment = (f"{before}Step {c.step} is wrong ({_KIND_WORDS.get(c.kind, c.kind)}): {what}. "
               "The error propagates to the answer, so the proof is invalid.")
    fix = (f"Step {c.step} should read {c.expected!r}; redo every later step from there." if c.expected else
           f"Remove step {c.step} and every step after it: the answer step must be the last.")
    return Annotation(reviewer_comment=" ".join([*slips, comment]), first_fatal_error_step=c.step,
                      recoverable_error_steps=c.recoverable, correction=" ".join([*fixes, fix])), c


def label_studio_result(a: Annotation) -> list[dict[str, Any]]:
    """An annotation as the ``result`` items Label Studio's frontend writes for our labeling config's controls
    (``data_pipeline.annotate.label_config``; read back by ``verifier.formats.task_to_record``)."""

    def text(name: str, value: str, to: str = "proof") -> dict[str, Any]:
        return {"from_name": name, "to_name": to, "type": "textarea", "value": {"text": [value]}}

    items = [text("reviewer_comment", a.reviewer_comment),
             {"from_name": "first_fatal_error_step", "to_name": "proof", "type": "number",
              "value": {"number": a.first_fatal_error_step}},
             text("recoverable_error_steps", ", ".join(map(str, a.recoverable_error_steps)) or "-1")]
    if a.remark:
        items.append(text("remark", a.remark, "problem"))
    if a.report_error_case:
        items.append({"from_name": "report_error_case", "to_name": "problem", "type": "choices",
                      "value": {"choices": [REPORT_CHOICE]}})
    if a.correction:
        items.append(text("correction", a.correction))
    return items


def annotate_tasks(tasks: list[dict[str, Any]], budget: int, annotator: str = SIMULATED_BY
                   ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(Label Studio export of the first ``budget`` tasks, summary): each task gets an id (as Label Studio assigns
    on import) and one submitted annotation; the tasks beyond the budget are counted, not written."""
    if budget < 0:
        raise InputError(f"simulated_expert config, field 'budget': must be >= 0, got {budget}")
    now = datetime.now(timezone.utc).isoformat()
    export, verdicts, kinds = [], Counter(), Counter()
    for i, task in enumerate(tasks[:budget], 1):
        data = task.get("data") if isinstance(task, dict) else None
        traj = (data or {}).get("trajectory")
        if not isinstance(traj, dict) or "problem" not in traj or "proof_steps" not in traj:
            raise InputError(f"task {i} of the tasks file, field 'data.trajectory': missing (not a task written "
                             "by data_pipeline.annotate export)")
        ann, check = expert_annotation(str(traj["problem"]), [str(s) for s in traj["proof_steps"]])
        verdicts["error_case" if ann.report_error_case else ann.polarity.value] += 1
        kinds[check.kind or "none"] += 1
        export.append({"id": i, "data": data, "annotations": [{
            "id": i, "completed_by": 0, "simulated_by": annotator, "was_cancelled": False, "ground_truth": False,
            "created_at": now, "updated_at": now, "lead_time": 0.0, "result": label_studio_result(ann)}]})
    summary = {"annotator": annotator, "budget": budget, "queued": len(tasks), "spent": len(export),
               "left": budget - len(export), "over_budget": max(0, len(tasks) - budget),
               "verdicts": dict(sorted(verdicts.items())), "error_kinds": dict(sorted(kinds.items()))}
    return export, summary


def run(cfg: SimulatedExpertConfig) -> dict[str, Any]:
    """Read the tasks, annotate within the budget, write ``export.json`` and the summary."""
    if not cfg.tasks or not cfg.out:
        raise InputError("simulated_expert config: tasks=PATH (tasks.json of data_pipeline.annotate export) and "
                         "out=DIR are required")
    path = Path(cfg.tasks)
    if not path.is_file():
        raise FileNotFoundError(f"simulated_expert config, field 'tasks': {path} does not exist")
    try:
        tasks = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"simulated_expert config, field 'tasks': {path} is not JSON ({e.msg}, line {e.lineno})"
                         ) from None
    if not isinstance(tasks, list):
        raise InputError(f"simulated_expert config, field 'tasks': {path} is not a JSON array of tasks")
    export, summary = annotate_tasks(tasks, cfg.budget, cfg.annotator)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "export.json").write_text(json.dumps(export, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    summary["tasks"] = str(path)
    (out / "simulated_expert_summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def main() -> None:
    """Hydra app: ``python -m data_pipeline.simulated_expert tasks=PATH out=DIR budget=K``."""

    @hydra_main("simulated_expert", SimulatedExpertConfig)
    def _run(cfg: SimulatedExpertConfig) -> None:
        s = run(cfg)
        print(f"simulated expert: annotated {s['spent']} of {s['queued']} queued proofs (budget {s['budget']}, "
              f"{s['over_budget']} over budget); verdicts {s['verdicts']}; export {Path(cfg.out) / 'export.json'} "
              f"(ingest it: python -m data_pipeline.ingest input={Path(cfg.out) / 'export.json'} out=DIR)")

    _run()


if __name__ == "__main__":
    main()
