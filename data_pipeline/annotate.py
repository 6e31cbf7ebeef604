"""The annotation round trip with Label Studio (appendix C.1, C.4, C.5).

``python -m data_pipeline.annotate export queue=PATH out=DIR [judgments=J.jsonl]`` writes

* ``label_config.xml``: the Label Studio labeling interface. The annotator sees (C.1) the
  problem, the optional official solution, the proof with its steps numbered from 0, and the
  auxiliary verifications — the verifier passes' verdicts, flagged first-error steps and
  rationales from the selection judgments — under a header marking them as unverified
  references. The annotator fills in the C.4 fields: reviewer comment, first fatal error
  step (-1 for none), recoverable error steps (-1 or comma-separated steps), remark, report
  error case, and optional correction suggestions (used by repair augmentation, section 4.2);
* ``tasks.json``: one Label Studio task per queued trajectory (the trajectory itself rides in
  ``data.trajectory`` so that the export maps back to it);
* ``README.md``: how to load both into Label Studio and how to bring the export back.

``python -m data_pipeline.annotate import input=EXPORT.json out=DIR`` (the same as
``python -m data_pipeline.ingest input=EXPORT.json out=DIR``, which recognises a Label Studio
JSON export) turns the exported annotations into our validated records (the export parser is
``verifier.formats.task_to_record``). The C.5 consistency rules are those of ``verifier.records.Annotation``; every error names the Label Studio task id
and the field, e.g. ``record 'p1-g0-s0-r0 (Label Studio task 7)', field
'annotation.recoverable_error_steps': recoverable steps [3] must come before the first fatal step 2``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from data_pipeline.ingest import IngestConfig, summary_line
from data_pipeline.ingest import run as ingest_run
from verifier.config import hydra_main
from verifier.errors import EXIT_USER_ERROR, InputError
from verifier.formats import REPORT_CHOICE, load_any
from verifier.io import DatasetError
from verifier.judgment import Judgment, load_judgments
from verifier.records import NO_STEP, ProofTrajectory, Verdict

AUX_HEADER = ("Auxiliary verifications: model outputs shown only as references. They are NOT verified; "
              "do not trust them by default. Your label must rest on your own judgment of the proof (appendix C.1).")

@dataclass
class AnnotateConfig:
    """Options of ``python -m data_pipeline.annotate export|import`` (mirrored by ``configs/annotate.yaml``)."""

    action: str = "export"  # export | import (the first word on the command line)
    queue: str | None = None  # export: annotation_queue.jsonl of data_pipeline.selection (or any trajectories)
    judgments: str | None = None  # export: eval.judge rows; default: judgments.jsonl beside the queue, if any
    out: str | None = None
    max_steps: int = 200  # upper bound of the step fields in the interface (checked exactly on import)
    max_rationale_chars: int = 3000  # per pass shown to the annotator
    input: str | None = None  # import: Label Studio JSON export
    on_error: str = "raise"  # import: raise | skip (see data_pipeline.ingest)
    name: str = "annotations"
    progress: bool = True


# ------------------------------------------------------------------------------------------ export


def label_config(max_steps: int = 200) -> str:
    """The labeling interface (Label Studio XML): C.1 display, C.4 fields."""
    q = quoteattr
    return f"""<View>
  <Style>.proof-ref {{ background: #fff7e0; border-left: 4px solid #e0a800; padding: 4px 8px; }}</Style>
  <Header value="Problem"/>
  <Text name="problem" value="$problem"/>
  <Header value="Official solution (optional; one correct approach, others may be valid)"/>
  <Text name="reference_solution" value="$reference_solution"/>
  <Header value="Proof (steps numbered from 0)"/>
  <Paragraphs name="proof" value="$proof_steps" nameKey="step" textKey="text" layout="dialogue"/>
  <View className="proof-ref">
    <Header value={q(AUX_HEADER)} size="6"/>
    <Paragraphs name="auxiliary" value="$auxiliary" nameKey="source" textKey="text"/>
  </View>
  <Header value="Your annotation (appendix C.4; step indices are zero-based)"/>
  <Header value="Reviewer comment: which parts are correct, which fail and why; review the whole proof." size="6"/>
  <TextArea name="reviewer_comment" toName="proof" rows="5" maxSubmissions="1" editable="true"/>
  <Header value="First fatal error step (-1 if the proof has no fatal error)" size="6"/>
  <Number name="first_fatal_error_step" toName="proof" min="-1" max="{max_steps}" required="true"/>
  <Header value="Recoverable error steps before the first fatal step (-1 if none; several: 1, 3)" size="6"/>
  <TextArea name="recoverable_error_steps" toName="proof" rows="1" maxSubmissions="1" editable="true"/>
  <Header value="Remark (abnormal cases: rendering errors, missing sections, mismatched pairs, flawed statements)" size="6"/>
  <TextArea name="remark" toName="problem" rows="2" maxSubmissions="1" editable="true"/>
  <Choices name="report_error_case" toName="problem" choice="multiple">
    <Choice value={q(REPORT_CHOICE)}/>
  </Choices>
  <Header value="Correction suggestions (optional; used to repair invalid proofs)" size="6"/>
  <TextArea name="correction" toName="proof" rows="3" maxSubmissions="1" editable="true"/>
</View>
"""


def auxiliary(traj: ProofTrajectory, judgment: Judgment | None, max_chars: int = 3000) -> list[dict[str, str]]:
    """The C.1 auxiliary verifications of one trajectory as Label Studio paragraphs."""
    sel = (traj.meta or {}).get("selection") or {}
    items: list[dict[str, str]] = []
    if sel:
        items.append({"source": "selection", "text": (
            f"verifier uncertainty {float(sel.get('entropy', 0.0)):.2f} bits; accept fraction "
            f"{float(sel.get('accept_fraction', 0.0)):.2f} over {sel.get('n_passes', '?')} passes")})
    if judgment is None:
        items.append({"source": "verifier", "text": "no verifier passes available for this proof"})
        return items
    flagged: dict[int, int] = {}
    for p in judgment.passes:
        if p.verdict is Verdict.INVALID and p.first_error_step != NO_STEP:
            flagged[p.first_error_step] = flagged.get(p.first_error_step, 0) + 1
    items.append({"source": "flagged steps", "text": "; ".join(
        f"step {s}: {n} pass(es)" for s, n in sorted(flagged.items())) or "no step flagged as a first fatal error"})
    model = judgment.model or "verifier"
    for i, p in enumerate(judgment.passes):
        if not p.ok or p.verdict is None:
            text = f"unparseable output ({p.status.value}: {p.detail})"
        else:
            rationale = p.rationale.strip()
            if len(rationale) > max_chars:
                rationale = rationale[:max_chars] + " [...]"
            text = f"verdict: {p.verdict.value}; first error step: {p.first_error_step}\n{rationale or '(no rationale)'}"
        items.append({"source": f"{model}, pass {i}", "text": text})
    return items


def task_for(traj: ProofTrajectory, judgment: Judgment | None, max_chars: int = 3000) -> dict[str, Any]:
    """One Label Studio task (``{"data": {...}}``) for a queued trajectory."""
    return {"data": {
        "trajectory_id": traj.id,
        "problem_id": traj.problem_id,
        "problem": traj.problem,
        "reference_solution": traj.reference_solution or "(no official solution)",
        "proof_steps": [{"step": f"Step {i}", "text": s} for i, s in enumerate(traj.proof_steps)],
        "auxiliary": auxiliary(traj, judgment, max_chars),
        "trajectory": traj.to_dict(),
    }}


def export(cfg: AnnotateConfig) -> Path:
    """Write ``label_config.xml``, ``tasks.json`` and ``README.md`` for the queue."""
    if not cfg.queue or not cfg.out:
        raise InputError("annotate export: queue=PATH and out=DIR are required")
    trajs = load_any(cfg.queue).records
    jpath = Path(cfg.judgments) if cfg.judgments else Path(cfg.queue).parent / "judgments.jsonl"
    if cfg.judgments and not jpath.exists():
        raise FileNotFoundError(f"annotate config, field 'judgments': {jpath} does not exist")
    judgments = {j.id: j for j in load_judgments(jpath, passes_only=True)} if jpath.exists() else {}
    too_long = [t.id for t in trajs if len(t.proof_steps) > cfg.max_steps + 1]
    if too_long:
        raise InputError(f"record {too_long[0]!r}, field 'proof_steps': more than max_steps={cfg.max_steps} steps; "
                         "raise max_steps")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = [task_for(t, judgments.get(t.id), cfg.max_rationale_chars) for t in trajs]
    (out / "label_config.xml").write_text(label_config(cfg.max_steps), encoding="utf-8")
    (out / "tasks.json").write_text(json.dumps(tasks, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    with_j = sum(t.id in judgments for t in trajs)
    (out / "README.md").write_text(
        f"# Annotation tasks ({len(tasks)} proofs)\n\n"
        f"Queue: `{cfg.queue}`; verifier passes shown for {with_j} of {len(tasks)} proofs"
        f"{f' (from `{jpath}`)' if jpath.exists() else ''}.\n\n"
        "1. Start Label Studio (`make label-studio` installs it in `.venv-labelstudio`; then\n"
        "   `.venv-labelstudio/bin/label-studio start`), create a project and paste `label_config.xml`\n"
        "   under *Settings → Labeling Interface → Code* (or `POST /api/projects` with it as `label_config`).\n"
        "2. Import `tasks.json` (*Import*), annotate, then *Export → JSON*.\n"
        "3. `python -m data_pipeline.ingest input=EXPORT.json out=DIR` (or `python -m data_pipeline.annotate\n"
        "   import input=EXPORT.json out=DIR`): validated records, errors naming the task id and field.\n",
        encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m data_pipeline.annotate export queue=PATH out=DIR`` | ``... import input=EXPORT.json out=DIR``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("export", "import"):
        print("usage: python -m data_pipeline.annotate export queue=PATH out=DIR [judgments=J.jsonl]\n"
              "       python -m data_pipeline.annotate import input=EXPORT.json out=DIR [on_error=raise|skip]",
              file=sys.stderr)
        raise SystemExit(2)
    sys.argv = [sys.argv[0], f"action={args[0]}", *args[1:]]

    @hydra_main("annotate", AnnotateConfig)
    def _run(cfg: AnnotateConfig) -> None:
        if cfg.action == "export":
            out = export(cfg)
            n = len(json.loads((out / "tasks.json").read_text(encoding="utf-8")))
            print(f"annotate export: {n} tasks; Label Studio config {out / 'label_config.xml'}, tasks {out / 'tasks.json'}")
            return
        icfg = IngestConfig(input=cfg.input, out=cfg.out, on_error=cfg.on_error, name=cfg.name, progress=cfg.progress)
        try:
            r = ingest_run(icfg)
        except DatasetError as e:
            print(f"annotate import failed: {e}\n(error report: {Path(cfg.out or '.') / 'errors.txt'})", file=sys.stderr)
            raise SystemExit(EXIT_USER_ERROR) from None
        print(summary_line(r, cfg.out))

    _run()


if __name__ == "__main__":
    main()
