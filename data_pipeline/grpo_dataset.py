"""GRPO dataset rows (section 4.3): a conversational verification prompt plus the
annotation columns the reward needs. TRL passes every extra column to reward
functions as a keyword list, so rows carry the whole trajectory as JSON too.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

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
        raise ValueError(f"record {traj.id!r}, field 'annotation': GRPO rows need an expert annotation")
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
    from datasets import Dataset

    return Dataset.from_list([grpo_row(t, with_reference) for t in trajs])
