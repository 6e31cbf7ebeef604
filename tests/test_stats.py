"""eval/stats.py: the project's one bootstrap (``paired_bootstrap``: paired, clustered by problem, with a seed
level), issue 40 item 1. Every bench, the demo's ladder and the eval reports call it."""

from __future__ import annotations

import numpy as np
import pytest

from eval.metrics import COLUMNS, metric_deltas, ratio_delta
from eval.stats import BootstrapInputError, BootstrapSpec, mean_delta_ci, mean_statistic, paired_bootstrap


def _random_rows(rng, n_problems=25, per_problem=4, seeds=3):
    """Random per-record COLUMNS rows of two arms (``seeds`` seeds each) on the same records."""
    pids = [f"p{i:02d}" for i in range(n_problems) for _ in range(per_problem)]
    rng.shuffle(pids)
    valid = rng.random(len(pids)) < 0.5

    def arm(p_right, p_meta):
        out = []
        for _ in range(seeds):
            right = rng.random(len(pids)) < p_right
            meta = right & (rng.random(len(pids)) < p_meta)
            rows = np.zeros((len(pids), len(COLUMNS)))
            c = {k: i for i, k in enumerate(COLUMNS)}
            rows[:, c["pos"]], rows[:, c["neg"]] = valid, ~valid
            rows[:, c["tp"]], rows[:, c["tn"]] = valid & right, ~valid & right
            rows[:, c["meta_tp"]], rows[:, c["meta_tn"]] = valid & meta, ~valid & meta
            rows[:, c["accept"]] = valid == right
            out.append(rows)
        return out

    return pids, arm(0.8, 0.7), arm(0.7, 0.6)


# bench_learning.metric_deltas_ci / ratio_delta_ci (removed in issue 40 item 1) on ``_random_rows(default_rng(11))``
# with n=500, seed=7: the numbers they returned, checked equal to ``metric_deltas`` / ``ratio_delta`` (exactly,
# every metric) before they were deleted. (point, lo, hi) of Meta BF1, Rough TNR and the ratio of columns 5 / 1.
OLD_METRIC_DELTAS_CI = {
    False: {"meta.balanced_f1": (0.12607342214808792, -0.029987406262, 0.267039664885),
            "rough.tnr": (0.03703703703703709, -0.114554195804, 0.196481481481),
            "ratio": (0.051851851851851816, -0.123958333333, 0.24018115942)},
    True: {"meta.balanced_f1": (0.12607342214808792, -0.001581983602, 0.267516828752),
           "rough.tnr": (0.03703703703703709, -0.094746376812, 0.203046085859),
           "ratio": (0.051851851851851816, -0.108615604988, 0.20984989648)},
}
OLD_VS_ONE_SEED_META_TPR = (0.1454545454545455, -0.033666666667, 0.326925925926)  # 3 seeds vs 1 (ladder: vs base)


@pytest.mark.parametrize("paired", [False, True])
def test_paired_bootstrap_reproduces_bench_learning_metric_deltas_ci(paired):
    """The same inputs and seed give the numbers the former bench_learning.metric_deltas_ci / ratio_delta_ci gave
    (eval/ladder_report.py and bench/step_rule.py now call eval.metrics.metric_deltas / ratio_delta)."""
    pids, A, B = _random_rows(np.random.default_rng(11))
    spec = BootstrapSpec(n=500, seed=7)
    d = metric_deltas(A, B, pids, spec, paired_seeds=paired)
    old = OLD_METRIC_DELTAS_CI[paired]
    assert d["meta.balanced_f1"] == pytest.approx(old["meta.balanced_f1"], abs=1e-12)
    assert d["rough.tnr"] == pytest.approx(old["rough.tnr"], abs=1e-12)
    assert ratio_delta(A, B, pids, spec, paired_seeds=paired, num=5, den=1) == pytest.approx(old["ratio"], abs=1e-12)
    assert metric_deltas(A, B[:1], pids, spec)["meta.tpr"] == pytest.approx(OLD_VS_ONE_SEED_META_TPR, abs=1e-12)


def _correlated(rng, n_problems=30, per_problem=10, effect=0.1, spread=0.3):
    """Per-record paired values where a problem's records share its own gain (problems differ a lot)."""
    pids = np.repeat(np.arange(n_problems), per_problem)
    gain = effect + spread * rng.standard_normal(n_problems)
    before = rng.random(len(pids))
    after = before + gain[pids] + 0.01 * rng.standard_normal(len(pids))
    return pids, before, after


def test_clustering_by_problem_widens_the_ci_on_correlated_data():
    """Records of one problem move together: resampling records (every record its own cluster) pretends there
    are 300 independent gains where there are 30; the problem-clustered CI is the wider (about sqrt(10) here)."""
    pids, before, after = _correlated(np.random.default_rng(0))
    spec = BootstrapSpec(n=1000, seed=0)
    d, lo, hi = mean_delta_ci(after, before, pids, spec)
    d_rec, lo_rec, hi_rec = mean_delta_ci(after, before, list(range(len(pids))), spec)
    assert d == pytest.approx(d_rec)
    assert (hi - lo) > 2 * (hi_rec - lo_rec)
    assert lo < 0 < lo_rec  # the record-level CI claims a gain the 30 problems do not support


def test_seed_level_resamples_seeds_and_pairs_them():
    """Seed level: an arm of S seeds [S, N]. Seeds that disagree widen the CI (resampled with the problems); seed
    k of both arms kept together (``paired_seeds``) removes the seed-to-seed spread they share."""
    rng = np.random.default_rng(1)
    pids = np.repeat(np.arange(20), 5)
    base = rng.random(len(pids))
    shift = np.array([-0.3, 0.0, 0.3])[:, None]  # seed k shifts both arms alike
    b = base[None] + shift
    a = b + 0.05
    spec = BootstrapSpec(n=800, seed=3)
    d, lo, hi = mean_delta_ci(a, b, pids, spec, paired_seeds=True)
    assert d == pytest.approx(0.05) and lo == pytest.approx(0.05) and hi == pytest.approx(0.05)
    d_i, lo_i, hi_i = mean_delta_ci(a, b, pids, spec)  # each arm's seeds on their own: the shared shift is noise
    assert d_i == pytest.approx(0.05) and lo_i < 0 < 0.05 < hi_i
    one_seed = mean_delta_ci(a[:1] - shift[:1], b[:1] - shift[:1], pids, spec)
    assert one_seed == pytest.approx((0.05, 0.05, 0.05))
    mean, mlo, mhi = mean_delta_ci(a, None, pids, spec)  # one arm: its mean over seeds and records
    assert mean == pytest.approx(a.mean()) and mlo < mean < mhi


def test_paired_deltas_use_the_same_problems_for_both_arms():
    """Paired records: the difference of arms that differ by a constant has a point CI however spread the records
    are (both arms draw the same problems); the difference of two statistics returns one triple per name."""
    rng = np.random.default_rng(2)
    pids = rng.integers(0, 15, 90)
    before = rng.random(90)
    assert mean_delta_ci(before + 0.1, before, pids, BootstrapSpec(n=300)) == pytest.approx((0.1, 0.1, 0.1))
    out = paired_bootstrap([np.stack([before + 0.1, np.ones(90)], -1), np.stack([before, np.ones(90)], -1)], pids,
                           lambda s: {"mean": mean_statistic(s), "n": s[..., 1]}, BootstrapSpec(n=300))
    assert out["mean"] == pytest.approx((0.1, 0.1, 0.1)) and out["n"] == (0.0, 0.0, 0.0)
    d, lo, hi = paired_bootstrap([before + 0.1, before], pids, lambda s: s[..., 0] / 90, BootstrapSpec(n=0))
    assert d == pytest.approx(0.1) and (lo, hi) == (None, None)  # n=0: the point alone


@pytest.mark.parametrize("arms, clusters, paired, match", [
    ([[0.5, 0.7, 0.9]], ["p", "p", "p"], False, "1 problem"),
    ([[0.5, 0.7, 0.9], [0.5, 0.7]], ["p", "q", "r"], False, "missing pairs: arm 1 has 2 records"),
    ([[0.5, np.nan, 0.9], [0.5, 0.7, 0.9]], ["p", "q", "r"], False, "missing pairs: arm 0, seed 0, record 1"),
    ([np.ones((2, 2, 1)), np.ones((3, 2, 1))], ["p", "q"], True, "paired seeds need the same seeds"),
])
def test_degenerate_inputs_give_one_clear_error(arms, clusters, paired, match):
    with pytest.raises(BootstrapInputError, match=match):
        paired_bootstrap(arms, clusters, lambda s: s[..., 0], BootstrapSpec(n=10), paired_seeds=paired)


def test_eval_reports_intervals_are_the_one_bootstrap():
    """eval.metrics.metric_table (every eval report's CIs) resamples through the same engine: one arm of one seed
    gives the interval of ``paired_bootstrap`` (clusters here already in sorted order, the order both then use)."""
    from eval.metrics import metric_statistic, metric_table

    rng = np.random.default_rng(5)
    rows = rng.integers(0, 2, size=(200, len(COLUMNS))).astype(float)
    clusters = sorted(f"q{i:02d}" for i in rng.integers(0, 40, 200))
    spec = BootstrapSpec(n=400, seed=3)
    table = metric_table(rows, clusters, ["rough.tpr", "meta.balanced_f1"], spec)
    one = paired_bootstrap([rows], clusters, metric_statistic(["rough.tpr", "meta.balanced_f1"]), spec)
    for k in ("rough.tpr", "meta.balanced_f1"):
        assert table[k]["ci"] == pytest.approx(list(one[k][1:]), abs=1e-12), k
        assert table[k]["value"] == pytest.approx(one[k][0], abs=1e-12), k
