"""Generic statistics shared by every evaluator: the clustered bootstrap.

Proofs of one problem are not independent (several generators, or several proofs per
problem), so confidence intervals resample *problems* with replacement and keep all of
a problem's proofs together (cluster bootstrap; Efron & Tibshirani 1993, ch. 6; the
"problem-level" resampling used by ProcessBench-style and IMO-ProofBench-style reports).

The fast path works on per-record count vectors: every headline metric of this project
(TPR, TNR, Balanced F1, accuracies, acceptance rates) is a function of column sums, so
one bootstrap is one fancy-indexing sum over ``B x C`` cluster draws.

``cluster_bootstrap`` is the vectorised engine; ``bootstrap_ci`` wraps it for any
statistic of rows (slower, for statistics that are not functions of sums).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import numpy as np


@dataclass(frozen=True)
class BootstrapSpec:
    """How intervals are computed; recorded in every metrics.json."""

    n: int = 1000  # bootstrap replicates
    seed: int = 0
    level: float = 0.95
    cluster: str = "problem_id"  # the record field resampled as one unit

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "seed": self.seed, "level": self.level, "cluster": self.cluster,
                "method": "percentile, clustered"}


def cluster_sums(values: np.ndarray, clusters: Sequence[Hashable]) -> np.ndarray:
    """Sum the rows of ``values`` ([N, K]) by cluster -> [C, K] (clusters in first-seen order).

    >>> cluster_sums(np.array([[1, 0], [1, 1], [0, 1]]), ["a", "b", "a"]).astype(int).tolist()
    [[1, 1], [1, 1]]
    """
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    if len(clusters) != len(values):
        raise ValueError(f"{len(clusters)} cluster keys for {len(values)} rows")
    index: dict[Hashable, int] = {}
    codes = np.array([index.setdefault(c, len(index)) for c in clusters], dtype=int)
    out = np.zeros((len(index), values.shape[1]))
    np.add.at(out, codes, values)
    return out


def cluster_bootstrap(
    values: np.ndarray,
    clusters: Sequence[Hashable],
    statistic: Callable[[np.ndarray], np.ndarray],
    spec: BootstrapSpec = BootstrapSpec(),
) -> tuple[float | None, float | None]:
    """Percentile CI of ``statistic(column sums)`` resampling clusters with replacement.

    ``values`` is [N, K] per record; ``statistic`` maps sums [B, K] -> [B] and returns NaN
    where undefined (e.g. no positives drawn); such replicates are dropped. Returns
    ``(None, None)`` when there is nothing to resample or every replicate is undefined.

    >>> v = np.array([[1, 1]] * 8 + [[1, 0]] * 2)          # 8 of 10 hits
    >>> lo, hi = cluster_bootstrap(v, list(range(10)), lambda s: s[:, 1] / s[:, 0], BootstrapSpec(n=500, seed=1))
    >>> 0.4 <= lo <= 0.8 <= hi <= 1.0
    True
    >>> cluster_bootstrap(v, [0] * 10, lambda s: s[:, 1] / s[:, 0])  # one cluster: a point
    (0.8, 0.8)
    """
    sums = cluster_sums(values, clusters)
    if len(sums) == 0 or spec.n <= 0:
        return None, None
    rng = np.random.default_rng(spec.seed)
    draws = rng.integers(0, len(sums), size=(spec.n, len(sums)))
    boot = sums[draws].sum(axis=1)  # [B, K]
    with np.errstate(divide="ignore", invalid="ignore"):
        stats = np.asarray(statistic(boot), dtype=float)
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return None, None
    a = (1 - spec.level) / 2
    lo, hi = np.quantile(stats, [a, 1 - a])
    return float(round(lo, 12)), float(round(hi, 12))


def bootstrap_ci(
    rows: Sequence[Any],
    clusters: Sequence[Hashable],
    statistic: Callable[[list[Any]], float | None],
    spec: BootstrapSpec = BootstrapSpec(),
) -> tuple[float | None, float | None]:
    """Percentile CI for any statistic of a list of rows (pure Python; for non-additive statistics).

    >>> rows = [1, 1, 1, 0, 1, 1, 0, 1]
    >>> lo, hi = bootstrap_ci(rows, list(range(8)), lambda r: sum(r) / len(r), BootstrapSpec(n=300))
    >>> lo <= 0.75 <= hi
    True
    """
    groups: dict[Hashable, list[Any]] = {}
    for r, c in zip(rows, clusters, strict=True):
        groups.setdefault(c, []).append(r)
    keys = list(groups)
    if not keys or spec.n <= 0:
        return None, None
    rng = np.random.default_rng(spec.seed)
    out = []
    for draw in rng.integers(0, len(keys), size=(spec.n, len(keys))):
        sample = [r for i in draw for r in groups[keys[i]]]
        v = statistic(sample)
        if v is not None and np.isfinite(v):
            out.append(v)
    if not out:
        return None, None
    a = (1 - spec.level) / 2
    lo, hi = np.quantile(out, [a, 1 - a])
    return float(lo), float(hi)


def safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den with NaN where den == 0 (vectorised).

    >>> safe_ratio(np.array([1., 0.]), np.array([2., 0.])).tolist()
    [0.5, nan]
    """
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def harmonic(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """2ab/(a+b), 0 where a+b == 0, NaN where either is NaN (vectorised).

    >>> harmonic(np.array([1., 0., .5]), np.array([0., 0., 1.])).round(4).tolist()
    [0.0, 0.0, 0.6667]
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    s = a + b
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(s > 0, 2 * a * b / np.where(s > 0, s, 1), np.where(np.isnan(s), np.nan, 0.0))
