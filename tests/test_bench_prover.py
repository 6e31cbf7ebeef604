"""bench-prover's problem sets: held-out problems are in no training set, and ``held_out_skip`` gives a fresh
held-out set disjoint from the one an earlier registered run read (the same candidate stream, its first N skipped)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.bench_prover import problem_sets
from bench.common import ProverHackingConfig

REPO = Path(__file__).resolve().parents[1]
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


BAD_OPTION = [("bench_prover.py", "bench-prover"), ("bench_loop.py", "bench-loop"),
              ("bench_learning.py", "bench-learning"), ("bench_reward.py", "bench-reward"),
              ("diagnose_control.py", "diagnose-control"), ("diagnose_prover.py", "diagnose-prover")]


@pytest.mark.parametrize(("script", "prog"), BAD_OPTION)
def test_a_bad_option_is_one_line_and_exit_2(script, prog):
    """Every bench takes ``key=value`` options through ``bench.common.set_options``: a mistyped key ends in one line
    ``PROG: error: unknown option ...`` and exit code 2 (the project's rule for a user's mistake), no traceback,
    before any work."""
    r = subprocess.run([sys.executable, str(REPO / "bench" / script), "stepz=3"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert r.stderr.strip().splitlines()[-1].startswith(f"{prog}: error: unknown option 'stepz'"), r.stderr[-500:]


def test_every_bench_entry_reports_user_errors_in_one_line():
    """A bench that raises ``InputError`` (or reads options) runs its ``main`` through ``run_command``."""
    for path in sorted((REPO / "bench").glob("*.py")):
        text = path.read_text()
        if "InputError(" in text or "set_options(" in text or "prover_options(" in text:
            if path.name == "common.py":
                continue
            assert 'if __name__ == "__main__":\n    run_command(' in text, path.name
