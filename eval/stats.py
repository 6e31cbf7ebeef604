"""Generic statistics shared by every evaluator: the clustered bootstrap.

Proofs of one problem are not independent (several generators, or several proofs per
problem), so confidence intervals resample *problems* with replacement and keep all of
a problem's proofs together (cluster bootstrap; Efron & Tibshirani 1993, ch. 6; the
"problem-level" resampling used by ProcessBench-style and IMO-ProofBench-style reports).

The fast path works on per-record count vectors: every headline metric of this project
(TPR, TNR, Balanced F1, accuracies, acceptance rates) is a function of column sums, so
one bootstrap is one fancy-indexing sum over ``B x C`` cluster draws.

``paired_bootstrap`` is the project's one bootstrap: paired (two arms on the same records
draw the same problems), clustered by problem, with an optional seed level (each arm's training seeds resampled
with the problems, or seed pairs kept together). Every bench (``eval.metrics.metric_deltas`` / ``ratio_delta``,
``mean_delta_ci``), the demo's ladder and the eval reports (``bootstrap_sums`` / ``cluster_bootstrap``: one arm of
one seed) resample through its engine (``_resample``). ``two_level_bootstrap_ci`` is the items x replicates
design of ProofJudge (replicates resampled within each item).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import numpy as np
from scipy.stats import binomtest
from sklearn.metrics import roc_auc_score

from verifier.errors import InputError
from verifier.judgment import Judgment


@dataclass
class BootstrapSpec:
    """How intervals are computed; recorded in every metrics.json. The one bootstrap config: every
    command's ``bootstrap.*`` (``eval.score``, ``eval.verifierbench``, ``eval.proverbench``,
    ``eval.proofjudge``) is this dataclass (``bootstrap_n``/``bootstrap_seed``/``ci_level`` were renamed
    ``bootstrap.n``/``bootstrap.seed``/``bootstrap.level``)."""

    n: int = 1000  # bootstrap replicates
    seed: int = 0
    level: float = 0.95
    cluster: str = "problem_id"  # the record field resampled as one unit

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "seed": self.seed, "level": self.level, "cluster": self.cluster,
                "method": "percentile, clustered"}


DEFAULT_BOOTSTRAP = BootstrapSpec()  # the default of the functions below (never mutated)

# the flat keys of eval.score / eval.verifierbench / eval.proverbench before ``bootstrap.*`` (still accepted)
BOOTSTRAP_RENAMED = {"bootstrap_n": "bootstrap.n", "bootstrap_seed": "bootstrap.seed", "ci_level": "bootstrap.level"}


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
    spec: BootstrapSpec = DEFAULT_BOOTSTRAP,
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
    boot = bootstrap_sums(values, clusters, spec)
    if boot is None:
        return None, None
    with np.errstate(divide="ignore", invalid="ignore"):
        return percentile_ci(np.asarray(statistic(boot), dtype=float), spec.level)


def bootstrap_sums(values: np.ndarray, clusters: Sequence[Hashable],
                   spec: BootstrapSpec = DEFAULT_BOOTSTRAP) -> np.ndarray | None:
    """Column sums of ``spec.n`` cluster resamples, [B, K] (None when nothing to resample).

    Compute once, then evaluate many statistics on it with ``percentile_ci``.
    """
    sums = cluster_sums(values, clusters)
    if len(sums) == 0 or spec.n <= 0:
        return None
    return _resample([sums[None]], spec)[0]  # the one engine, one arm of one seed (clusters in first-seen order)


def percentile_ci(stats: np.ndarray, level: float = 0.95) -> tuple[float | None, float | None]:
    """Percentile interval of bootstrap replicates; NaN replicates (undefined) are dropped.

    >>> percentile_ci(np.array([0.1, 0.2, np.nan, 0.3]), 0.5)
    (0.15, 0.25)
    """
    stats = np.asarray(stats, dtype=float)
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return None, None
    a = (1 - level) / 2
    lo, hi = np.quantile(stats, [a, 1 - a])
    return float(round(lo, 12)), float(round(hi, 12))


class BootstrapInputError(InputError):
    """Inputs the paired bootstrap cannot resample (one problem, records without a pair, seeds that do not pair)."""


def _cluster_codes(clusters: Sequence[Hashable]) -> tuple[np.ndarray, int]:
    """Cluster index of every record, clusters in sorted order (first-seen order for unsortable keys)."""
    try:
        keys = sorted(set(clusters))
    except TypeError:
        keys = list(dict.fromkeys(clusters))
    index = {k: i for i, k in enumerate(keys)}
    return np.array([index[c] for c in clusters], dtype=int), len(keys)


def _as_arm(values: Any, i: int) -> np.ndarray:
    """One arm as [S, N, K] (S seeds, N records, K columns): [N] and [N, K] are one seed."""
    a = np.asarray(values, dtype=float)
    if a.ndim == 1:
        a = a[None, :, None]
    elif a.ndim == 2:
        a = a[None]
    elif a.ndim != 3:
        raise BootstrapInputError(f"paired bootstrap: arm {i} has shape {a.shape}; want [N], [N, K] or [S, N, K]")
    if a.shape[0] == 0:
        raise BootstrapInputError(f"paired bootstrap: arm {i} has no seeds")
    return a


def _resample(per_problem: list[np.ndarray], spec: BootstrapSpec, paired_seeds: bool = False) -> list[np.ndarray]:
    """The resampling of ``paired_bootstrap`` (and ``bootstrap_sums``): arms [S, C, K] of per-problem sums ->
    each arm's sums [spec.n, K] over the drawn problems (shared by the arms) and the drawn seeds of each arm."""
    rng = np.random.default_rng(spec.seed)
    n_clusters = per_problem[0].shape[1]
    P = rng.integers(0, n_clusters, size=(spec.n, n_clusters))
    if len(per_problem) == 1 and per_problem[0].shape[0] == 1:  # one arm, one seed: the problems alone
        return [per_problem[0][0][P].sum(axis=1)]
    seeds = [rng.integers(0, per_problem[0].shape[0], size=(spec.n, per_problem[0].shape[0]))]
    for p in per_problem[1:]:
        seeds.append(seeds[0] if paired_seeds else rng.integers(0, p.shape[0], size=(spec.n, p.shape[0])))
    return [p[s[:, :, None], P[:, None, :]].sum((1, 2)) for p, s in zip(per_problem, seeds)]


def paired_bootstrap(
    arms: Sequence[Any],
    clusters: Sequence[Hashable],
    statistic: Callable[[np.ndarray], Any],
    spec: BootstrapSpec = DEFAULT_BOOTSTRAP,
    paired_seeds: bool = False,
) -> Any:
    """The project's one bootstrap: paired, clustered by problem, with an optional seed level.

    ``arms`` holds one or two arms; each is per-record values [N], [N, K] or [S, N, K] (S training seeds),
    the N records in the same order in every arm (record i of both arms is the same proof: a paired design)
    and ``clusters[i]`` the problem of record i. ``statistic`` maps column sums [..., K] to a value [...]
    (an array, or a dict name -> array), e.g. ``s[..., 1] / s[..., 0]``; NaN marks an undefined replicate
    (dropped). One arm: the statistic; two arms: statistic(A) - statistic(B).

    Each of ``spec.n`` replicates draws problems with replacement (the same problems for every arm: all of a
    problem's records, seeds and passes stay together) and, at the seed level, the seed indices of each arm
    with replacement: independently per arm, or with ``paired_seeds`` one draw for all arms (seed k of A with
    seed k of B, arms that share seed k's sampling); an arm of one seed keeps it. The point is the statistic of
    all sums (every seed, every record). Returns ``(point, lo, hi)`` (percentile interval at ``spec.level``;
    ``lo``, ``hi`` None when ``spec.n`` is 0 or every replicate is undefined), or ``{name: (point, lo, hi)}``.

    Random draws (``numpy.random.default_rng(spec.seed)``): problems [n, C] first, then the seeds of arm A
    [n, S_A], then (unless paired) of arm B [n, S_B]; clusters in sorted order.

    Inputs the bootstrap cannot resample raise ``BootstrapInputError``: fewer than two problems, arms of other
    records (a record without its pair) or a non-finite value (a missing record), paired seeds of unequal number.

    >>> after, before = np.c_[[0.7, 0.6, 0.8, 0.7], [1] * 4], np.c_[[0.5] * 4, [1] * 4]  # [value, count] columns
    >>> d, lo, hi = paired_bootstrap([after, before], ["p", "q", "r", "s"], mean_statistic, BootstrapSpec(n=200))
    >>> round(d, 3), lo > 0
    (0.2, True)
    """
    if not 1 <= len(arms) <= 2:
        raise BootstrapInputError(f"paired bootstrap: {len(arms)} arms (one arm, or two for a difference)")
    A = [_as_arm(a, i) for i, a in enumerate(arms)]
    n_rec = len(clusters)
    for i, a in enumerate(A):
        if a.shape[1] != n_rec:
            raise BootstrapInputError(f"paired bootstrap: missing pairs: arm {i} has {a.shape[1]} records for "
                                      f"{n_rec} problem keys (every record needs its value in every arm)")
        if a.shape[2] != A[0].shape[2]:
            raise BootstrapInputError(f"paired bootstrap: arm {i} has {a.shape[2]} columns, arm 0 {A[0].shape[2]}")
        bad = ~np.isfinite(a)
        if bad.any():
            s, r, _ = np.argwhere(bad)[0]
            raise BootstrapInputError(f"paired bootstrap: missing pairs: arm {i}, seed {s}, record {r} is not a "
                                      f"number ({a[s, r, 0]}); drop the record from every arm")
    codes, n_clusters = _cluster_codes(clusters)
    if n_clusters < 2:
        raise BootstrapInputError(f"paired bootstrap: {n_clusters} problem(s); resampling problems needs at least 2")
    if paired_seeds and len({a.shape[0] for a in A}) > 1:
        raise BootstrapInputError("paired bootstrap: paired seeds need the same seeds in every arm "
                                  f"({' vs '.join(str(a.shape[0]) for a in A)} runs)")
    per_problem = []
    for a in A:  # [S, C, K]: each problem's sums under each seed
        out = np.zeros((a.shape[0], n_clusters, a.shape[2]))
        for s in range(a.shape[0]):
            np.add.at(out[s], codes, a[s])
        per_problem.append(out)

    def contrast(sums: list[np.ndarray]) -> Any:
        with np.errstate(divide="ignore", invalid="ignore"):
            vals = [statistic(x) for x in sums]
        if len(vals) == 1:
            return vals[0]
        if isinstance(vals[0], dict):
            return {k: np.asarray(vals[0][k], float) - np.asarray(vals[1][k], float) for k in vals[0]}
        return np.asarray(vals[0], float) - np.asarray(vals[1], float)

    point = contrast([p.sum((0, 1)) for p in per_problem])
    boot = contrast(_resample(per_problem, spec, paired_seeds)) if spec.n > 0 else None

    def triple(pt: Any, bs: Any) -> tuple[float, float | None, float | None]:
        lo, hi = (None, None) if bs is None else percentile_ci(np.asarray(bs, float), spec.level)
        return float(pt), lo, hi

    if isinstance(point, dict):
        return {k: triple(point[k], None if boot is None else boot[k]) for k in point}
    return triple(point, boot)


def mean_statistic(sums: np.ndarray) -> np.ndarray:
    """The mean of a per-record value from sums of [value, count] columns (``mean_delta_ci``'s statistic)."""
    return safe_ratio(sums[..., 0], sums[..., 1])


def _with_count(values: Any) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return np.stack([v, np.ones_like(v)], axis=-1)


def mean_delta_ci(after: Any, before: Any | None, clusters: Sequence[Hashable],
                  spec: BootstrapSpec = DEFAULT_BOOTSTRAP, paired_seeds: bool = False
                  ) -> tuple[float, float | None, float | None]:
    """Mean of a per-record value (``before`` None) or the paired difference ``after - before`` of means, with
    the clustered (problems, seeds) CI of ``paired_bootstrap``. ``after``/``before`` are [N] or [S, N] (seeds).

    >>> d, lo, hi = mean_delta_ci([0.7, 0.6, 0.8, 0.7], [0.5] * 4, ["a", "a", "b", "b"], BootstrapSpec(n=200))
    >>> round(d, 3), lo > 0
    (0.2, True)
    """
    arms = [_with_count(after)] + ([] if before is None else [_with_count(before)])
    return paired_bootstrap(arms, clusters, mean_statistic, spec, paired_seeds)


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


# --- judge statistics (TCS-Bench AUC, ProofJudge sign test, replicate noise) ----------


def auc_mann_whitney(scores: Sequence[float], labels: Sequence[bool | int]) -> float | None:
    """ROC AUC (= Mann-Whitney U / (n_pos n_neg): P(score of a positive > score of a negative), ties 1/2).

    TCS-Bench reports the AUC of critique scores (fraction of critiques accepting) against
    gold correctness. ``sklearn.metrics.roc_auc_score``; ``None`` when one class is empty,
    a ValueError for a non-finite score.

    >>> auc_mann_whitney([0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0])
    1.0
    >>> auc_mann_whitney([0.5, 0.5, 0.5], [1, 0, 1])
    0.5
    >>> auc_mann_whitney([0.2, 0.4], [1, 1]) is None
    True
    """

    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    if s.shape != y.shape:
        raise ValueError(f"{len(s)} scores for {len(y)} labels")
    if not np.isfinite(s).all():
        raise ValueError(f"AUC: score {int(np.flatnonzero(~np.isfinite(s))[0])} is not finite ({s[~np.isfinite(s)][0]})")
    if y.all() or not y.any():
        return None
    return float(roc_auc_score(y, s))


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value (ties already dropped): ``scipy.stats.binomtest(wins, n, 1/2)``.

    ProofJudge: every judge aligns with reviewers above chance "at p < 1e-5 by sign test".

    >>> round(sign_test(9, 1), 6)
    0.021484
    >>> sign_test(0, 0)
    1.0
    """
    n = int(wins) + int(losses)
    if n == 0:
        return 1.0

    return float(binomtest(int(wins), n, 0.5, alternative="two-sided").pvalue)


def replicate_matrix(values: Sequence[Sequence[float | None]]) -> list[np.ndarray]:
    """Items x replicates (ragged, None = missing/unparseable) -> per-item arrays of present values."""
    return [np.asarray([v for v in row if v is not None], dtype=float) for row in values]


def two_level_bootstrap_ci(
    values: Sequence[Sequence[float | None]],
    spec: BootstrapSpec = DEFAULT_BOOTSTRAP,
    resample_replicates: bool = True,
) -> tuple[float | None, float | None]:
    """Percentile CI of the grand mean, clustered over items and replicates (two-stage bootstrap).

    ``values[i]`` holds item i's replicate outcomes (e.g. 1 = judge aligned with reviewers,
    0 = not; or a verifier's passes of one proof). Each bootstrap draws items with
    replacement, then, within each drawn item, its replicates with replacement; the
    statistic is the mean over all drawn (item, replicate) cells. This is the interval of
    ProofJudge Table 1 ("a clustered bootstrap over declarations and replicates").
    Items without any present value are left out (count them before calling).

    >>> lo, hi = two_level_bootstrap_ci([[1, 1, 0], [1, 1, 1], [0, 1, 0], [1, 1, 1]] * 5, BootstrapSpec(n=500))
    >>> lo < 0.75 < hi
    True
    >>> two_level_bootstrap_ci([[1, 1], [1]], BootstrapSpec(n=50))
    (1.0, 1.0)
    """
    items = [r for r in replicate_matrix(values) if r.size]
    if not items or spec.n <= 0:
        return None, None
    rng = np.random.default_rng(spec.seed)
    sizes = np.array([len(r) for r in items])
    width = int(sizes.max())
    pad = np.zeros((len(items), width))
    for i, r in enumerate(items):
        pad[i, : len(r)] = r
    draws = rng.integers(0, len(items), size=(spec.n, len(items)))  # [B, C] items
    n_rep = sizes[draws]  # [B, C]
    if resample_replicates:
        u = rng.random((spec.n, len(items), width))
        reps = np.minimum((u * n_rep[..., None]).astype(int), n_rep[..., None] - 1)  # [B, C, W]
        mask = np.arange(width)[None, None, :] < n_rep[..., None]
        cell = pad[draws[..., None], reps] * mask
    else:
        cell = pad[draws]
        mask = np.arange(width)[None, None, :] < n_rep[..., None]
    stats = cell.sum(axis=(1, 2)) / mask.sum(axis=(1, 2))
    a = (1 - spec.level) / 2
    lo, hi = np.quantile(stats, [a, 1 - a])
    return float(round(lo, 12)), float(round(hi, 12))


def flip_rate(verdicts: Sequence[Sequence[Any]]) -> dict[str, float | int | None]:
    """Verdict noise across replicates (ProofJudge section 3: re-runs flip 1/5 to 1/2 of verdicts).

    ``verdicts[i]`` are item i's verdicts over replicates (None = missing, skipped).
    Returns ``pairwise`` - over all pairs of replicates of the same item, the fraction that
    disagree (= expected fraction of verdicts flipped between two re-runs) - and
    ``unstable`` - the fraction of items whose replicates are not unanimous - with the
    numbers of items and pairs behind them (items with < 2 present verdicts are left out).

    >>> flip_rate([[1, 1, 1], [1, 0, 1], [0, 0]])
    {'pairwise': 0.285714285714, 'unstable': 0.333333333333, 'n_items': 3, 'n_pairs': 7}
    >>> flip_rate([[1], [None, 0]])["n_items"]
    0
    """
    pairs = differ = unstable = n_items = 0
    for row in verdicts:
        vs = [v for v in row if v is not None]
        if len(vs) < 2:
            continue
        n_items += 1
        counts: dict[Any, int] = {}
        for v in vs:
            counts[v] = counts.get(v, 0) + 1
        m = len(vs)
        pairs += m * (m - 1) // 2
        differ += m * (m - 1) // 2 - sum(c * (c - 1) // 2 for c in counts.values())
        unstable += len(counts) > 1
    return {
        "pairwise": round(differ / pairs, 12) if pairs else None,
        "unstable": round(unstable / n_items, 12) if n_items else None,
        "n_items": n_items,
        "n_pairs": pairs,
    }


def _judgment_with_passes(row: dict[str, Any] | Judgment) -> Judgment:
    """A judge row as its judgment record (``Judgment.from_row``); a row without ``passes`` is an ``InputError``."""
    if isinstance(row, Judgment):
        return row
    if "passes" not in row:
        raise InputError(f"record {row.get('id')!r}, field 'passes': missing (judge rows need their passes)")
    return Judgment.from_row(row, passes_only=True)


def pass_noise(rows: Sequence[dict[str, Any] | Judgment], spec: BootstrapSpec = DEFAULT_BOOTSTRAP) -> dict[str, Any]:
    """Flip rate and clustered CI of our own verifier's passes (rows as written by ``eval.judge``, each read
    by ``verifier.judgment.Judgment.from_row``, or the judgment records themselves).

    Each row has ``id`` and ``passes`` (a list of dicts with ``verdict`` valid / invalid or
    None when unparseable). Returns the per-pass accept rate with its two-level bootstrap CI
    (clustered over trajectories and passes), the flip rate across passes, and the number of
    unparseable passes (counted, left out of both statistics). Early-stopped rows (``early_stopped``:
    passes cut at the first rejection) bias both statistics; they are counted in ``n_early_stopped``,
    judge with ``judge.early_stop=false`` for noise estimates.

    >>> rows = [{"id": "a", "passes": [{"verdict": "valid"}, {"verdict": "invalid"}]},
    ...         {"id": "b", "passes": [{"verdict": "valid"}, {"verdict": None}]}]
    >>> r = pass_noise(rows, BootstrapSpec(n=100))
    >>> r["accept_rate"], r["flip"]["pairwise"], r["n_unparseable"]
    (0.666666666667, 1.0, 1)
    """
    matrix, verdicts, unparseable, n_pass = [], [], 0, 0
    judgments = [_judgment_with_passes(r) for r in rows]
    for j in judgments:
        vs = []
        for p in j.passes:
            n_pass += 1
            if p.verdict is None:
                unparseable += 1
                vs.append(None)
            else:
                vs.append(p.verdict.value)
        verdicts.append(vs)
        matrix.append([None if v is None else float(v == "valid") for v in vs])
    present = [x for r in matrix for x in r if x is not None]
    lo, hi = two_level_bootstrap_ci(matrix, spec)
    return {
        "accept_rate": round(float(np.mean(present)), 12) if present else None,
        "ci": [lo, hi],
        "flip": flip_rate(verdicts),
        "n_trajectories": len(rows),
        "n_passes": n_pass,
        "n_unparseable": unparseable,
        "n_early_stopped": sum(j.early_stopped for j in judgments),
        "bootstrap": spec.to_dict() | {"method": "percentile, two-level (trajectories, passes)"},
    }
