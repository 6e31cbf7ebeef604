"""ProofJudge statistics on fixed inputs: sign test vs scipy, clustered bootstrap, flip rate, pass noise."""

import itertools

import numpy as np
import pytest
from scipy.stats import binomtest

from eval.stats import BootstrapSpec, flip_rate, pass_noise, sign_test, two_level_bootstrap_ci


@pytest.mark.parametrize("wins,losses", [(9, 1), (140, 70), (30, 30), (0, 5), (101, 117), (1, 0)])
def test_sign_test_matches_scipy(wins, losses):
    assert sign_test(wins, losses) == pytest.approx(binomtest(wins, wins + losses, 0.5).pvalue, rel=1e-9)


def test_two_level_bootstrap_is_wider_than_ignoring_items_and_contains_mean():
    rng = np.random.default_rng(0)
    # items differ a lot (per-item alignment prob), replicates are noisy within an item
    probs = rng.uniform(0, 1, size=80)
    values = [(rng.random(3) < p).astype(float).tolist() for p in probs]
    mean = np.mean(values)
    lo, hi = two_level_bootstrap_ci(values, BootstrapSpec(n=2000, seed=1))
    assert lo < mean < hi
    # naive iid bootstrap over 240 cells ignores the clustering: narrower
    flat = np.ravel(values)
    boots = flat[np.random.default_rng(1).integers(0, flat.size, size=(2000, flat.size))].mean(axis=1)
    naive = np.quantile(boots, [0.025, 0.975])
    assert (hi - lo) > (naive[1] - naive[0])
    # the two-stage interval also agrees with a direct pure-Python two-stage bootstrap
    r = np.random.default_rng(7)
    direct = []
    for _ in range(2000):
        items = r.integers(0, len(values), size=len(values))
        cells = [values[i][j] for i in items for j in r.integers(0, 3, size=3)]
        direct.append(np.mean(cells))
    dlo, dhi = np.quantile(direct, [0.025, 0.975])
    assert abs(dlo - lo) < 0.03 and abs(dhi - hi) < 0.03
    # deterministic under its seed, missing replicates allowed
    assert two_level_bootstrap_ci(values, BootstrapSpec(n=300, seed=3)) == two_level_bootstrap_ci(
        values, BootstrapSpec(n=300, seed=3))
    assert two_level_bootstrap_ci([[None, None]]) == (None, None)


def test_flip_rate_against_bruteforce():
    rng = np.random.default_rng(4)
    rows = [[int(x) if rng.random() > 0.1 else None for x in rng.integers(0, 2, size=4)] for _ in range(50)]
    pairs = differ = 0
    unstable = items = 0
    for row in rows:
        vs = [v for v in row if v is not None]
        if len(vs) < 2:
            continue
        items += 1
        unstable += len(set(vs)) > 1
        for a, b in itertools.combinations(vs, 2):
            pairs += 1
            differ += a != b
    fr = flip_rate(rows)
    assert fr["pairwise"] == pytest.approx(differ / pairs)
    assert fr["unstable"] == pytest.approx(unstable / items)
    assert fr["n_pairs"] == pairs and fr["n_items"] == items


def test_pass_noise_on_judge_rows():
    rows = [{"id": f"t{i}", "verdict": "valid",
             "passes": [{"index": k, "verdict": v, "parse_status": "ok" if v else "no_answer_block"}
                        for k, v in enumerate(vs)]}
            for i, vs in enumerate([["valid"] * 8, ["valid", "invalid"] * 4, [None] * 2 + ["invalid"] * 6])]
    r = pass_noise(rows, BootstrapSpec(n=200))
    assert r["n_unparseable"] == 2 and r["n_passes"] == 24 and r["n_trajectories"] == 3
    assert r["accept_rate"] == pytest.approx(12 / 22)
    assert r["flip"]["unstable"] == pytest.approx(1 / 3)
    assert r["ci"][0] <= r["accept_rate"] <= r["ci"][1]
    with pytest.raises(ValueError, match="'t9'.*passes"):
        pass_noise([{"id": "t9"}])


def test_pass_noise_reads_eval_judge_rows():
    """Rows written by eval.judge (verifier.judgment.Judgment.to_row) feed pass_noise directly."""
    from verifier.aggregate import AggregationPolicy, aggregate
    from verifier.judgment import Judgment
    from verifier.parser import format_verification, parse_verification

    ok, bad, junk = (parse_verification(t) for t in (format_verification("valid", -1, "fine"),
                                                         format_verification("invalid", 1, "no"), "garbage"))
    pol = AggregationPolicy(n=4)
    rows = [Judgment(id=i, aggregate=aggregate(ps, pol), passes=ps, seeds=[1, 2, 3, 4]).to_row()
            for i, ps in (("t0", [ok, ok, ok, ok]), ("t1", [ok, bad, junk, ok]))]
    r = pass_noise(rows, BootstrapSpec(n=100))
    assert (r["n_trajectories"], r["n_passes"], r["n_unparseable"], r["n_early_stopped"]) == (2, 8, 1, 0)
    assert r["accept_rate"] == pytest.approx(6 / 7)
    assert r["flip"]["pairwise"] == pytest.approx(2 / 9)  # t0: 6 agreeing pairs; t1: 2 of 3 pairs differ


@pytest.mark.parametrize("wins,losses", [(1200, 900), (5000, 5100)])
def test_sign_test_on_large_counts(wins, losses):
    # ProofJudge-scale cell counts (thousands of declarations x replicates): 2**n overflowed a float
    assert sign_test(wins, losses) == pytest.approx(binomtest(wins, wins + losses, 0.5).pvalue, rel=1e-9)
