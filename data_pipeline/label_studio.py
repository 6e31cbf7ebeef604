"""The Label Studio format of our annotation tasks (appendix C.4, C.5): the controls of the labeling
config and the export parser (``task_to_record``). ``data_pipeline.annotate`` writes the tasks and the
config; ``data_pipeline.ingest`` reads an export back through ``task_to_record``."""

from __future__ import annotations

from typing import Any

from verifier.records import NO_STEP, Annotation, RecordError

REPORT_CHOICE = "Report error case"
# control name -> (annotation field, Label Studio result type)
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
    return {**traj, "annotation": a.to_dict(), "meta": meta}
