"""Benchmark of verifier-uncertainty selection (sections 3.1, 4.1): ``make bench-select``.

Scores and selects over 1,000,000 synthetic verdict rows (125,000 trajectories x 8 passes,
about 31,000 problems) with the vectorised ``data_pipeline.selection.score``, and runs a plain
Python per-trajectory reference on a slice of the same rows, side by side: the two must give
the same entropies and statuses on the slice; the ratio is printed. Target: <= 10 s.
Last line (contract): ``verdict_rows=<n> seconds=<s>``.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import last_line, run_command, set_options  # noqa: E402, RUF100
from data_pipeline.selection import SelectConfig, score  # noqa: E402, RUF100

N_ROWS = 1_000_000
PASSES = 8


@dataclass
class SelectBenchConfig:
    """``make bench-select``'s options (``key=value``, ``bench.common.set_options``)."""

    verdict_rows: int = N_ROWS
    budget: int = 20_000
    per_problem_cap: int = 2


def synthetic_rows(n_rows: int, passes: int = PASSES, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Verdict rows of a mixed population: easy, hard and uncertain trajectories, some unparseable passes."""
    rng = np.random.default_rng(seed)
    n_traj = n_rows // passes
    pid = rng.integers(0, max(1, n_traj // 4), n_traj)
    p_accept = rng.choice([1.0, 0.97, 0.5, 0.2, 0.0], size=n_traj, p=[0.35, 0.15, 0.2, 0.15, 0.15])
    t = np.repeat(np.arange(n_traj), passes)
    u = rng.random(n_traj * passes)
    verdict = np.where(u < p_accept[t], 1, 0).astype(np.int8)
    verdict[rng.random(verdict.size) < 0.02] = -1
    step = np.where(verdict == 0, rng.integers(0, 6, verdict.size), -1)
    trajs = pd.DataFrame({"id": [f"t{i}" for i in range(n_traj)], "problem_id": [f"p{p}" for p in pid]})
    return pd.DataFrame({"traj": t, "verdict": verdict, "step": step}), trajs


def reference(verdicts: pd.DataFrame, trajs: pd.DataFrame, cfg: SelectConfig) -> pd.DataFrame:
    """Plain Python, one trajectory at a time (outcome=verdict, unparseable=category): entropy,
    problem and proof filters; no ranking, so the printed ratio understates the speed-up."""
    outcomes = defaultdict(list)
    for t, v in zip(verdicts["traj"].tolist(), verdicts["verdict"].tolist()):
        outcomes[t].append(v)
    rows = []
    for i, (rid, pid) in enumerate(zip(trajs["id"], trajs["problem_id"])):
        vs = outcomes.get(i, [])
        c = Counter(vs)
        ent = -sum(k / len(vs) * math.log2(k / len(vs)) for k in c.values()) if vs else 0.0
        acc = c[1] / len(vs) if vs else 0.0
        rows.append((rid, pid, len(vs), acc, ent))
    easy = defaultdict(lambda: True)
    for rid, pid, n, acc, ent in rows:
        if n and acc < cfg.easy_accept_fraction:
            easy[pid] = False
    status = {}
    elig = []
    for rid, pid, n, acc, ent in rows:
        if not n:
            status[rid] = "no_judgment"
        elif easy[pid]:
            status[rid] = "dropped_easy_problem"
        elif ent <= cfg.min_entropy:
            status[rid] = "dropped_trivial"
        else:
            elig.append((rid, pid, ent))
    return pd.DataFrame(rows, columns=["id", "problem_id", "n", "acc", "entropy"]), status, elig


def main(argv: list[str] | None = None) -> None:
    opts = set_options(SelectBenchConfig(), sys.argv[1:] if argv is None else argv)
    cfg = SelectConfig(budget=opts.budget, per_problem_cap=opts.per_problem_cap, min_entropy=0.0)
    verdicts, trajs = synthetic_rows(opts.verdict_rows)
    t0 = time.perf_counter()
    df = score(verdicts, trajs, cfg)
    fast = time.perf_counter() - t0
    sel = df[df["status"] == "selected"]
    assert len(sel) == cfg.budget and sel.groupby("problem_id").size().max() <= cfg.per_problem_cap

    # side by side on a slice: same entropies and filter decisions, and the speed ratio
    n_slice = 100_000 // PASSES
    v_s = verdicts[verdicts["traj"] < n_slice]
    tr_s = trajs.iloc[:n_slice].reset_index(drop=True)
    t0 = time.perf_counter()
    ref, ref_status, _ = reference(v_s, tr_s, cfg)
    slow = time.perf_counter() - t0
    t0 = time.perf_counter()
    df_s = score(v_s, tr_s, SelectConfig(min_entropy=0.0))
    fast_s = time.perf_counter() - t0
    assert np.allclose(df_s["entropy"].to_numpy(), ref["entropy"].to_numpy())
    mismatch = sum(1 for rid, s in ref_status.items() if str(df_s["status"].iloc[int(rid[1:])]) != s)
    assert mismatch == 0, f"{mismatch} status mismatches against the reference"
    print(f"status counts: {df['status'].value_counts().to_dict()}")
    print(f"slice of {len(v_s)} rows: python reference (entropy + filters, no ranking) {slow:.3f}s, "
          f"vectorised (all of it) {fast_s:.3f}s, "
          f"speed-up x{slow / max(fast_s, 1e-9):.1f} (entropies and statuses identical)")
    print(f"full: {len(verdicts)} rows vectorised {fast:.3f}s; python reference extrapolated "
          f"{slow * len(verdicts) / len(v_s):.1f}s (x{slow * len(verdicts) / len(v_s) / fast:.1f}); target <= 10 s")
    last_line({"verdict_rows": len(verdicts), "seconds": fast}, ".3f", {"verdict_rows": "d"})


if __name__ == "__main__":
    run_command("bench-select", main)
