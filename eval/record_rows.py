"""Per-record indicator rows of a judged run: the units every paired CI over problems and seeds resamples
(``eval.metrics.metric_deltas`` / ``ratio_delta`` on ``eval.stats.paired_bootstrap``; Table 3, section 5.4).

* ``record_counts``: ``eval.metrics.COLUMNS`` counts per record from a run's predictions;
* ``localisation_rows``: [rejected invalid proof, its first-error step exact] per record;
* ``pooled_metrics``: Rough / Meta TPR, TNR, Balanced F1 over all (seed, record) rows;
* ``step_rows``: the counts under each step rule of multi-pass judging (section 4.4): every pass on its own
  (``per_pass``), the pessimistic verdict with the earliest step, or with the step most passes name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eval.metrics import COLUMNS, Prediction, metric_table, record_row
from eval.stats import harmonic, safe_ratio
from verifier.aggregate import AggregationPolicy, aggregate
from verifier.errors import InputError
from verifier.io import read_jsonl
from verifier.meta_verifier import RuleMetaVerifier
from verifier.records import NO_STEP, ParseStatus, Verdict, VerificationOutput

METRICS = ("rough.tpr", "rough.tnr", "rough.balanced_f1", "meta.tpr", "meta.tnr", "meta.balanced_f1")


def record_counts(gold, predictions_jsonl: Path):
    """Per-record indicator rows (``eval.metrics.record_row``) of a run's predictions, in gold order."""
    preds = {str(r["id"]): Prediction.from_dict(r) for r in read_jsonl(predictions_jsonl)}
    missing = [t.id for t in gold if t.id not in preds]
    if missing:
        raise InputError(f"{predictions_jsonl}: no prediction for {len(missing)} held-out records, e.g. {missing[0]!r}")
    return np.array([record_row(t, preds[t.id]) for t in gold], dtype=float)


def localisation_rows(gold, predictions_jsonl: Path):
    """Per-record [rejected invalid proof, its first-error step exact] indicators (section 5.4's localisation)."""
    preds = {str(r["id"]): Prediction.from_dict(r) for r in read_jsonl(predictions_jsonl)}
    rows = []
    for t in gold:
        p = preds[t.id]
        rejected = (not t.annotation.is_valid) and p.verdict is Verdict.INVALID
        rows.append([int(rejected), int(rejected and p.first_error_step == t.annotation.first_fatal_error_step)])
    return np.array(rows, dtype=float)


def pooled_metrics(gold, per_seed, spec) -> dict[str, Any]:
    """Rough / Meta TPR, TNR, Balanced F1 over all (seed, record) pairs; CIs resample problems."""
    rows = np.concatenate(per_seed)
    clusters = [t.problem_id for t in gold] * len(per_seed)
    return metric_table(rows, clusters, list(METRICS), spec)


RULES = ("per_pass", "earliest", "most_named")
RULE_META = RuleMetaVerifier(near=1)  # localisation grading: EXACT only at the fatal step, BASIC within one


def _row(t, verdict: Verdict | None, step: int) -> list[int]:
    out = VerificationOutput(ParseStatus.OK if verdict else ParseStatus.MISSING_FIELD, verdict, step)
    return record_row(t, Prediction(t.id, verdict, step, RULE_META.grade(t, out).grade))


def step_rows(gold, judgments) -> dict[str, np.ndarray]:
    """Per gold record (in gold order): ``COLUMNS`` counts under each rule (``per_pass`` sums its passes) and
    ``loc`` = [rejecting passes on an invalid proof, of them naming the exact fatal step]."""
    by_id = {j.id: j for j in judgments}
    rows: dict[str, list] = {r: [] for r in (*RULES, "loc")}
    for t in gold:
        j = by_id.get(t.id)
        if j is None:
            raise InputError(f"record {t.id!r}: no judgment")
        passes = [(p.verdict if p.ok else None, p.first_error_step if p.ok else NO_STEP) for p in j.passes]
        rows["per_pass"].append(np.sum([_row(t, v, s) for v, s in passes], axis=0))
        rows["earliest"].append(_row(t, j.verdict, j.first_error_step))
        named = [s for v, s in passes if v is Verdict.INVALID and s >= 0]
        most = aggregate(j.passes, AggregationPolicy(n=len(j.passes), step_rule="most_named"))
        rows["most_named"].append(_row(t, most.verdict, most.first_error_step))
        k = t.annotation.first_fatal_error_step
        rows["loc"].append([len(named), sum(s == k for s in named)] if not t.annotation.is_valid else [0, 0])
    return {r: np.asarray(v, dtype=float) for r, v in rows.items()}


def meta_values(rows: list[np.ndarray]) -> dict[str, float]:
    """Meta TPR / TNR / Balanced F1 of rows pooled over seeds."""
    s = np.sum([r.sum(0) for r in rows], axis=0)
    c = {n: s[i] for i, n in enumerate(COLUMNS)}
    tpr, tnr = safe_ratio(c["meta_tp"], c["pos"]), safe_ratio(c["meta_tn"], c["neg"])
    return {"meta.tpr": float(tpr), "meta.tnr": float(tnr), "meta.balanced_f1": float(harmonic(tpr, tnr))}
