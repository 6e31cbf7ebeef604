"""`bench/diagnose_control.py`'s GRPO seed: a replicate of gold GRPO from the same SFT checkpoint and dev samples."""

from pathlib import Path

from bench.diagnose_control import grpo_config, grpo_seed, parse, seed_tag


def test_grpo_seed_names_the_run_and_seeds_only_grpo(tmp_path: Path):
    """``grpo_seed=G`` seeds the GRPO run (sampling, data order) and tags its names; the prover's seed (SFT, the
    problem sets and the dev samples) stays ``seed``. Without it, GRPO runs under the prover seed, names untagged."""
    cfg, own = parse(["recipe=loop", "seed=1", "grpo_seed=10", "prover_sft_steps=2000", "from_step=400"])
    assert (cfg.seed, grpo_seed(cfg, own), seed_tag(own)) == (1, 10, "_g10")
    rc = grpo_config(cfg, tmp_path, "run", tmp_path / "warm", 3e-5, 256, 128, grpo_seed(cfg, own))
    assert rc.grpo.seed == 10 and rc.data.seed == 1
    cfg, own = parse(["recipe=loop", "seed=1", "prover_sft_steps=2000", "from_step=400"])
    assert (grpo_seed(cfg, own), seed_tag(own)) == (1, "")
    assert grpo_config(cfg, tmp_path, "run", tmp_path / "warm", 3e-5, 256, 128, grpo_seed(cfg, own)).grpo.seed == 1


def test_reliable_counts_problems_with_at_least_half_true():
    """``reliable``: groups of k samples (one problem's) with at least half of them true; truth spread one or two per
    problem counts none."""
    from bench.diagnose_control import reliable

    assert reliable([1, 1, 0, 0] + [1, 0, 0, 0] + [0, 0, 0, 0] + [1, 1, 1, 0], 4) == 2
    assert reliable([1, 0, 0, 0, 0, 0, 0, 0] * 3 + [1, 1, 0, 0, 0, 0, 0, 0] * 5, 8) == 0
    assert reliable([1, 1, 1, 1, 0, 0, 0, 0], 8) == 1


def test_reliable_start_picks_most_mixed_among_checkpoints_past_the_threshold():
    """``warm=reliable``: only checkpoints with >= 3% of the GRPO problems solved reliably qualify; among them the most
    mixed dev groups (ties: the earlier); none qualifying: None. It needs the GRPO problems' samples."""
    import pytest

    from bench.common import InputError
    from bench.diagnose_control import reliable_start

    def e(step, mixed, rel):
        return {"step": step, "mixed_groups": mixed, "train_reliable": rel, "train_groups": 256}

    # seed 1's shape: many mixed groups, nothing solved reliably -> no start
    assert reliable_start([e(1200, 20, 1), e(1600, 58, 2), e(2000, 69, 1)]) is None
    # seed 0's shape: the most mixed among those past the threshold, not the most mixed overall
    assert reliable_start([e(800, 90, 1), e(1200, 81, 79), e(1600, 46, 200)]) == 1200
    assert reliable_start([e(1600, 41, 8), e(2000, 41, 19)]) == 1600  # tie: the earlier; 8 of 256 qualifies
    assert reliable_start([e(1600, 41, 7)]) is None
    assert reliable_start([{"step": 400, "mixed_groups": 5, "train_reliable": 6, "train_groups": 200}]) == 400  # 3%
    with pytest.raises(InputError, match="train_samples=true"):
        parse(["recipe=loop", "warm=reliable", "prover_sft_steps=2000", "from_step=400"])


def test_warm_starts_resolve_names_in_order_once():
    """``warm``: steps, ``best`` and ``reliable`` resolved in the order given, each step once; ``reliable`` without a
    qualifying checkpoint is dropped beside another warm start and an error alone."""
    import pytest

    from bench.common import InputError
    from bench.diagnose_control import warm_starts

    assert warm_starts("reliable,best", 2000, 800) == [800, 2000]
    assert warm_starts("best,1200", 1200, None) == [1200]
    assert warm_starts("reliable,best", 2000, None) == [2000]
    with pytest.raises(InputError, match="no warm start"):
        warm_starts("reliable", 2000, None)
