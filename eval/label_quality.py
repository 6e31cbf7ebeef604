"""An annotator's labels against exact truth, with intervals clustered by problem: how good the expert-free
labels of ``data_pipeline.autolabel`` (or any labelling: one verifier pass, n pessimistic passes) are where the
synthetic task's exact checker knows every proof's truth (the labels that sections 3.1 and 4.1 ask experts for).

``python bench/diagnose_autolabel.py`` measures them; ``data_pipeline.autolabel.measure`` is the point summary
that the command writes, ``measure_ci`` adds the clustered bootstrap (``eval.stats``, the project's one engine).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from data_pipeline.autolabel import MEASURE_COLUMNS, measure_row
from eval.stats import BootstrapSpec, bootstrap_sums, percentile_ci, safe_ratio
from verifier.records import NO_STEP

RATES = ("coverage", "precision_invalid", "recall_invalid_all", "precision_valid", "exact_first_step")


def rates_of(sums: np.ndarray) -> dict[str, np.ndarray]:
    """``RATES`` from column sums ([..., MEASURE_COLUMNS]; NaN where a rate has no cases). ``precision_valid``:
    of the proofs labelled valid, the share truly valid (a false proof labelled valid teaches a verifier to
    accept it); ``recall_invalid_all``: of every truly invalid proof, the share labelled invalid."""
    c = {k: sums[..., i] for i, k in enumerate(MEASURE_COLUMNS)}
    return {"coverage": safe_ratio(c["labelled"], c["proofs"]),
            "precision_invalid": safe_ratio(c["tp"], c["tp"] + c["fp"]),
            "recall_invalid_all": safe_ratio(c["tp"], c["truly_invalid"]),
            "precision_valid": safe_ratio(c["tn"], c["tn"] + c["fn"]),
            "exact_first_step": safe_ratio(c["step_exact"], c["step_known"])}


def measure_ci(labels: Mapping[str, Mapping[str, tuple[str, int]]], truth: Mapping[str, tuple[bool, int]],
               problems: Mapping[str, str], spec: BootstrapSpec = BootstrapSpec(),
               versus: tuple[str, str] | None = None) -> dict[str, Any]:
    """Each labelling's ``RATES`` against exact truth with a 95% CI clustered by problem (one resample of the
    problems for every labelling, so ``versus=(a, b)`` also gives each rate's paired difference a - b).
    ``labels[name][proof id]``: (decision, step); a proof missing from a labelling is undecided."""
    ids = list(truth)
    names = list(labels)
    per = np.array([[measure_row(labels[n].get(i, ("undecided", NO_STEP)), truth[i]) for n in names] for i in ids],
                   dtype=float)  # [proofs, labellings, columns]
    boot = bootstrap_sums(per.reshape(len(ids), -1), [problems[i] for i in ids], spec)
    boot = None if boot is None else boot.reshape(-1, len(names), len(MEASURE_COLUMNS))
    point = rates_of(per.sum(0))
    drawn = None if boot is None else rates_of(boot)
    out: dict[str, Any] = {"proofs": len(ids), "problems": len(set(problems[i] for i in ids)),
                           "interval": f"percentile bootstrap over problems ({spec.n} draws), paired across labellings"}
    for j, n in enumerate(names):
        out[n] = {r: {"value": _num(point[r][j]), "ci": None if drawn is None else percentile_ci(drawn[r][:, j])}
                  for r in RATES}
        out[n]["counts"] = dict(zip(MEASURE_COLUMNS, per.sum(0)[j].astype(int).tolist()))
    if versus is not None:
        a, b = names.index(versus[0]), names.index(versus[1])
        out[f"{versus[0]} - {versus[1]}"] = {r: {"value": _num(point[r][a] - point[r][b]), "ci": None if drawn is None
                                                 else percentile_ci(drawn[r][:, a] - drawn[r][:, b])} for r in RATES}
    return out


def _num(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)
