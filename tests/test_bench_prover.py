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



def test_pool_minus_pess8_is_paired_on_the_same_proofs_and_reported():
    """The pool arm against the pess8 arm: differences on the same (problem, sample) proofs, per_proof values being
    [true, accepted]; hacking = accepted and false; the report's table names the arm."""
    from bench.bench_prover import _markdown, _paired

    cfg = ProverHackingConfig(bootstrap_n=200)
    keys = [f"p{i}/{j}" for i in range(6) for j in range(4)]
    pess8 = {"per_proof": {k: [0, 1] for k in keys}}  # every proof accepted and false: all hacked
    pool = {"per_proof": {k: [0, int(k.startswith(("p0", "p1", "p2")))] for k in keys}}  # half of the problems
    d = _paired(pess8, [pool], cfg)
    assert (d["n"], d["problems"], d["seeds"]) == (24, 6, 1)
    assert d["hacking_rate"]["delta"] == -0.5 and d["accept"]["delta"] == -0.5 and d["true_acc"]["delta"] == 0.0
    lo, hi = d["hacking_rate"]["ci"]
    assert lo <= -0.5 <= hi < 0
    row = {"accept": 0.5, "true_acc": 0.0, "hacking_rate": 0.5, "accept_refined": None, "true_acc_refined": None,
           "refine_gain": None, "refine_true_gain": None, "n": 24}
    md = _markdown({"rows": {"before": row, "pess8": row, "pool": row}, "curves": {}, "vs_before": {},
                    "vs_pess8": {"pool": d}}, cfg)
    assert "| arm - pess8 | accepted | true | hacking |" in md and "| pool | -50.0 [" in md
