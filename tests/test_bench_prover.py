"""bench-prover's problem sets: held-out problems are in no training set, and ``held_out_skip`` gives a fresh
held-out set disjoint from the one an earlier registered run read (the same candidate stream, its first N skipped)."""

from __future__ import annotations

from bench.bench_prover import problem_sets
from bench.common import ProverHackingConfig

TASK = {"min_steps": 3, "max_steps": 3, "max_operand": 9, "recoverable_rate": 0.0, "qe_fraction": 0.0,
        "subjects": ["arithmetic"]}


def test_held_out_skip_gives_a_fresh_disjoint_held_out_set():
    cfg = ProverHackingConfig(n_prover_sft=300, n_grpo=64, n_eval=30)
    sft, grpo, held, _ = problem_sets(cfg, TASK)
    training = {p.problem for p in sft + grpo}
    assert held and not training & {p.problem for p in held}
    assert not {p.problem for p in sft} & {p.problem for p in grpo}

    first = [p.problem for p in held]
    _, _, fresh, _ = problem_sets(ProverHackingConfig(n_prover_sft=300, n_grpo=64, n_eval=60, held_out_skip=len(first)),
                                  TASK)
    fresh_text = [p.problem for p in fresh]
    assert len(fresh_text) > len(first)
    assert not set(first) & set(fresh_text) and not training & set(fresh_text)
    # the candidate stream is the same: without the skip, the larger set starts with the earlier one
    _, _, both, _ = problem_sets(ProverHackingConfig(n_prover_sft=300, n_grpo=64, n_eval=len(first) + len(fresh_text),
                                                     held_out_skip=0), TASK)
    assert [p.problem for p in both][: len(first)] == first

