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
