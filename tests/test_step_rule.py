"""bench/step_rule.py: the three step rules of item 4's exploratory analysis (issue 23) on judgments whose
passes name different steps; the earliest-step row must equal what the bench scores (``verifier.aggregate``)."""

from __future__ import annotations

import numpy as np

from eval.metrics import COLUMNS
from verifier.aggregate import AggregationPolicy, aggregate
from verifier.judgment import Judgment
from verifier.parser import format_verification, parse_verification
from verifier.records import Annotation, ProofTrajectory


def _judgment(rid: str, answers: list[tuple[str, int]]) -> Judgment:
    passes = [parse_verification(format_verification(v, s, "checked")) for v, s in answers]
    return Judgment(rid, aggregate(passes, AggregationPolicy(n=len(passes))), passes, n=len(passes))


def test_step_rules_on_passes_that_disagree():
    from eval.record_rows import step_rows

    steps = tuple(f"s{i}" for i in range(8))
    bad = ProofTrajectory("bad", "p1", "P", steps, annotation=Annotation(first_fatal_error_step=5))
    good = ProofTrajectory("good", "p2", "P", steps, annotation=Annotation(first_fatal_error_step=-1))
    # bad: 4 passes reject, naming 2 (3 steps early: POOR), 5, 5, 6; 4 accept. good: all 4 accept.
    j_bad = _judgment("bad", [("invalid", 2), ("invalid", 5), ("invalid", 5), ("invalid", 6),
                              ("valid", -1), ("valid", -1), ("valid", -1), ("valid", -1)])
    j_good = _judgment("good", [("valid", -1)] * 4)
    assert j_bad.first_error_step == 2  # the aggregate's rule: the earliest step a rejecting pass names
    rows = step_rows([bad, good], [j_bad, j_good])
    col = {c: i for i, c in enumerate(COLUMNS)}
    assert rows["earliest"][0, col["tn"]] == 1 and rows["earliest"][0, col["meta_tn"]] == 0  # step 2: POOR
    assert rows["most_named"][0, col["meta_tn"]] == 1  # step 5: named twice, EXACT
    # per pass: 4 rejections, 3 within one step of 5 (5, 5, 6) pass the BASIC threshold; the valid proof's 4 accept
    assert rows["per_pass"][0, col["tn"]] == 4 and rows["per_pass"][0, col["meta_tn"]] == 3
    assert rows["per_pass"][1, col["meta_tp"]] == 4
    np.testing.assert_array_equal(rows["loc"], [[4, 2], [0, 0]])  # exact step on 2 of 4 rejecting passes
