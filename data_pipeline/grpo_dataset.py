"""GRPO dataset rows (section 4.3): a conversational verification prompt plus the
annotation columns the reward needs. TRL passes every extra column to reward
functions as a keyword list, so rows carry the whole trajectory as JSON too.

``python -m data_pipeline.grpo_dataset variant=base|extra_ann|pos_aug base=PATH [extra=PATH]
[augmented=PATH] [held_out=PATH] out=DIR`` builds the Table 3 data ablation variants (section 5.4):
base annotations, + extra (uncertainty-selected) annotations, + repair-augmented positives.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from verifier.config import hydra_main
from verifier.errors import InputError
from verifier.formats import load_any
from verifier.identity import ProblemIndex
from verifier.io import write_jsonl
from verifier.records import ProofTrajectory
from verifier.templates import as_messages, verification_prompt

GRPO_COLUMNS = ("prompt", "id", "problem_id", "gold_verdict", "first_fatal_error_step", "fatal_step_unknown",
                "recoverable_error_steps", "reviewer_comment", "n_steps", "subject", "split", "trajectory")


def grpo_row(traj: ProofTrajectory, with_reference: bool = True) -> dict[str, Any]:
    """One annotated trajectory as a GRPO row.

    >>> from verifier.records import Annotation
    >>> t = ProofTrajectory("t1", "p1", "P", ("a", "b"), annotation=Annotation(first_fatal_error_step=1))
    >>> r = grpo_row(t); r["gold_verdict"], r["first_fatal_error_step"], r["prompt"][0]["role"]
    ('invalid', 1, 'user')
    """
    ann = traj.annotation
    if ann is None:
        raise InputError(f"record {traj.id!r}, field 'annotation': GRPO rows need an expert annotation")
    return {
        "prompt": as_messages(verification_prompt(traj, with_reference=with_reference)),
        "id": traj.id,
        "problem_id": traj.problem_id,
        "gold_verdict": ann.polarity.value,
        "first_fatal_error_step": ann.first_fatal_error_step,
        "fatal_step_unknown": ann.fatal_step_unknown,
        "recoverable_error_steps": list(ann.recoverable_error_steps),
        "reviewer_comment": ann.reviewer_comment,
        "n_steps": len(traj.proof_steps),
        "subject": traj.subject,
        "split": traj.split,
        "trajectory": json.dumps(traj.to_dict(), ensure_ascii=False),
    }


def trajectory_from_row(row_trajectory: str) -> ProofTrajectory:
    """Rebuild the trajectory from a row's ``trajectory`` column (for the reward)."""
    return ProofTrajectory.from_dict(json.loads(row_trajectory))


def build_grpo_dataset(trajs: Iterable[ProofTrajectory], with_reference: bool = True):
    """A ``datasets.Dataset`` of GRPO rows; unannotated or error-case records must be filtered before."""
    # lazy: datasets takes seconds to import (it pulls pyarrow and fsspec); only the GRPO table needs it
    from datasets import Dataset

    return Dataset.from_list([grpo_row(t, with_reference) for t in trajs])


# --------------------------------------------------------------------------------------------
# Ablation data variants (Table 3: base annotations, + extra annotation, + positive augmentation)

VARIANTS = {
    "base": ("base",),
    "extra_ann": ("base", "extra"),
    "pos_aug": ("base", "extra", "augmented"),
}


@dataclass
class GrpoDataConfig:
    """Options of ``python -m data_pipeline.grpo_dataset`` (mirrored by ``configs/grpo_data.yaml``).

    ``variant`` picks the sources: ``base`` (the base annotations), ``extra_ann`` (+ the extra,
    uncertainty-selected annotations, section 4.1), ``pos_aug`` (+ the accepted repairs, section 4.2).
    Each source is an ingested folder, a parquet file or a trajectory JSONL.
    """

    variant: str = "base"
    base: str | None = None
    extra: str | None = None
    augmented: str | None = None  # positives.jsonl written by data_pipeline.augment
    held_out: str | None = None  # held-out trajectories: no problem of them may be in the training rows
    out: str | None = None
    with_reference: bool = False
    unusable: str = "skip"  # unannotated / report_error_case records: skip (counted) | error
    shuffle: bool = True
    seed: int = 0


def variant_trajectories(cfg: GrpoDataConfig) -> tuple[list[ProofTrajectory], dict[str, Any]]:
    """The training trajectories of ``cfg.variant`` and counts by origin, polarity and skip reason.

    Raises ValueError naming the record and field on a duplicate id across sources, on a training
    problem that is also held out (a repair inherits its parent's problem id), or on an unusable
    record when ``unusable=error``; and naming the variant, source and path when a source of the
    variant has no usable record (an empty ``extra`` or ``augmented`` would give the smaller variant's data).
    """

    if cfg.variant not in VARIANTS:
        raise InputError(f"grpo_data config, field 'variant': use one of {list(VARIANTS)}, got {cfg.variant!r}")
    if cfg.unusable not in ("skip", "error"):
        raise InputError(f"grpo_data config, field 'unusable': use skip or error, got {cfg.unusable!r}")
    # the one leak check: a held-out problem by id, or by its text under another id (a candidate set generated apart)
    held = ProblemIndex(load_any(cfg.held_out).records if cfg.held_out else ())
    out: list[ProofTrajectory] = []
    seen: dict[str, str] = {}
    counts: dict[str, Any] = {"variant": cfg.variant, "by_origin": {}, "skipped": {}}
    for origin in VARIANTS[cfg.variant]:
        path = getattr(cfg, origin)
        if not path:
            raise InputError(f"grpo_data config, field {origin!r}: variant {cfg.variant!r} needs this source")
        kept = 0
        for t in load_any(path).records:
            reason = None
            if t.annotation is None:
                reason = "unannotated"
            elif t.annotation.report_error_case:
                reason = "report_error_case"
            if reason:
                if cfg.unusable == "error":
                    raise InputError(f"record {t.id!r}, field 'annotation': {reason} ({origin} source {path})")
                counts["skipped"][f"{origin}:{reason}"] = counts["skipped"].get(f"{origin}:{reason}", 0) + 1
                continue
            if t.id in seen:
                raise InputError(f"record {t.id!r}, field 'id': duplicate id in sources {seen[t.id]!r} and {origin!r}")
            leak = held.shared(t)
            if leak:
                raise InputError(f"{leak}; the training rows would leak it ({origin} source {path})")
            seen[t.id] = origin
            out.append(t)
            kept += 1
        if not kept:  # an empty extra / augmented source would silently give the smaller variant's data
            why = ", ".join(f"{k.split(':', 1)[1]} {v}" for k, v in counts["skipped"].items()
                            if k.startswith(f"{origin}:")) or "no records"
            raise InputError(f"grpo_data config, field {origin!r}: variant {cfg.variant!r} needs usable records "
                             f"from its {origin!r} source, but {path} has none ({why})")
        counts["by_origin"][origin] = kept
    if cfg.shuffle:
        random.Random(cfg.seed).shuffle(out)
    counts["rows"] = len(out)
    counts["polarity"] = dict(Counter(t.annotation.polarity.value for t in out))
    counts["problems"] = len({t.problem_id for t in out})
    return out, counts


def write_variant(cfg: GrpoDataConfig) -> dict[str, Any]:
    """Write ``trajectories.jsonl`` (the trainer's ``data.train_path``), the GRPO rows as a
    ``datasets`` dataset (``dataset/`` + ``data.parquet``) and ``summary.json`` under ``cfg.out``."""

    if not cfg.out:
        raise InputError("grpo_data config, field 'out': an output folder is required (out=DIR)")
    trajs, counts = variant_trajectories(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "trajectories.jsonl", trajs)
    ds = build_grpo_dataset(trajs, with_reference=cfg.with_reference)
    ds.save_to_disk(str(out / "dataset"))
    ds.to_parquet(str(out / "data.parquet"))
    (out / "summary.json").write_text(json.dumps(counts, indent=1) + "\n", encoding="utf-8")
    return counts


def main() -> None:
    """Hydra app: ``python -m data_pipeline.grpo_dataset variant=pos_aug base=... extra=... augmented=... out=DIR``."""

    @hydra_main("grpo_data", GrpoDataConfig)
    def _run(cfg: GrpoDataConfig) -> None:
        c = write_variant(cfg)
        print(f"GRPO data variant {c['variant']}: {c['rows']} rows ({c['by_origin']}, polarity {c['polarity']}, "
              f"skipped {c['skipped'] or 0}) written to {cfg.out}")

    _run()


if __name__ == "__main__":
    main()
