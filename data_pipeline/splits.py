"""Leak-free train / held-out splits by problem (section 5.4: a held-out set of 94 samples).

``python -m data_pipeline.splits input=PATH out=DIR [held_out_size=94] [seed=0] [stratify_by=[polarity,subject]]``

Whole problems go to one side, never both (asserted before anything is written by
``verifier.identity.assert_disjoint``); records whose problem ids differ but whose problem texts are
the same are one problem. The
held-out side is chosen to match the strata proportions (default polarity x subject) of
the whole set: problems are visited in a seed-determined order and a problem is taken
when it brings the held-out stratum counts closer to their targets, then the remaining
gap is filled by the best-fitting problems. Its size is ``held_out_size`` trajectories
(or ``held_out_fraction`` of them); since problems are indivisible the achieved size can
differ from the request by less than one problem's trajectories, and it is reported.
Writes ``train.jsonl``, ``held_out.jsonl`` and ``split_summary.json`` (counts per stratum).
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from verifier.config import hydra_main
from verifier.errors import InputError
from verifier.formats import load_any
from verifier.identity import assert_disjoint, problem_id_of
from verifier.io import write_jsonl
from verifier.records import ProofTrajectory

STRATA_FIELDS = ("polarity", "subject", "split", "source")


@dataclass
class SplitConfig:
    """Options of ``python -m data_pipeline.splits`` (mirrored by ``configs/split.yaml``)."""

    input: str | None = None  # ingested folder, parquet or trajectory JSONL
    out: str | None = None
    held_out_size: int | None = 94  # trajectories on the held-out side (paper: 94)
    held_out_fraction: float | None = None  # alternative to held_out_size
    seed: int = 0
    stratify_by: list[str] = field(default_factory=lambda: ["polarity", "subject"])


@dataclass
class Split:
    train: list[ProofTrajectory]
    held_out: list[ProofTrajectory]
    requested: int
    strata: list[str]

    def summary(self) -> dict[str, Any]:
        return {
            "requested_held_out": self.requested,
            "train": len(self.train), "held_out": len(self.held_out),
            "train_problems": len({t.problem_id for t in self.train}),
            "held_out_problems": len({t.problem_id for t in self.held_out}),
            "strata": self.strata,
            "train_by_stratum": dict(sorted(Counter(stratum(t, self.strata) for t in self.train).items())),
            "held_out_by_stratum": dict(sorted(Counter(stratum(t, self.strata) for t in self.held_out).items())),
            "held_out_problem_ids": sorted({t.problem_id for t in self.held_out}),
        }


def stratum(t: ProofTrajectory, fields: Sequence[str]) -> str:
    """The stratum key of a trajectory, e.g. ``invalid|algebra``."""
    vals = []
    for f in fields:
        if f == "polarity":
            vals.append(t.gold_verdict.value if t.gold_verdict else "unannotated")
        elif f in STRATA_FIELDS:
            vals.append(getattr(t, f) or "(none)")
        else:
            raise InputError(f"split config, field 'stratify_by': unknown stratum field {f!r}; use {STRATA_FIELDS}")
    return "|".join(vals)


def problems_by_identity(trajs: Sequence[ProofTrajectory]) -> dict[str, str]:
    """``problem_id`` -> the problem it belongs to: ids whose records share a problem text
    (``verifier.identity.problem_id_of``) are one problem, named by its first id in sorted order."""
    parent: dict[str, str] = {}

    def root(pid: str) -> str:
        while parent[pid] != pid:
            pid = parent[pid]
        return pid

    by_text: dict[str, str] = {}
    for t in sorted(trajs, key=lambda t: t.problem_id):
        parent.setdefault(t.problem_id, t.problem_id)
        other = by_text.setdefault(problem_id_of(t.problem), t.problem_id)
        a, b = sorted((root(t.problem_id), root(other)))
        parent[b] = a
    return {pid: root(pid) for pid in parent}


def split_by_problem(trajs: Sequence[ProofTrajectory], held_out_size: int | None = 94,
                     held_out_fraction: float | None = None, seed: int = 0,
                     stratify_by: Sequence[str] = ("polarity", "subject")) -> Split:
    """Held-out set by problem id, stratified by ``stratify_by``, reproducible by ``seed``.

    >>> from data_pipeline.synthetic import generate_synthetic
    >>> s = split_by_problem(generate_synthetic(200, seed=0), held_out_size=40)
    >>> len(s.held_out), len(s.train), {t.problem_id for t in s.train} & {t.problem_id for t in s.held_out}
    (40, 160, set())
    """
    ids = [t.id for t in trajs]
    if len(set(ids)) != len(ids):
        dup = next(i for i, c in Counter(ids).items() if c > 1)
        raise InputError(f"record {dup!r}, field 'id': duplicate id")
    n = len(trajs)
    if held_out_fraction is not None:
        if not 0.0 <= held_out_fraction <= 1.0:
            raise InputError(f"split config, field 'held_out_fraction': must be in [0, 1], got {held_out_fraction}")
        size = int(round(held_out_fraction * n))
    elif held_out_size is not None:
        if held_out_size < 0:
            raise InputError(f"split config, field 'held_out_size': must be >= 0, got {held_out_size}")
        size = held_out_size
    else:
        raise InputError("split config: set held_out_size or held_out_fraction")
    if size > n:
        raise InputError(f"split config, field 'held_out_size': {size} > {n} trajectories")
    problem_of = problems_by_identity(trajs)
    strata = sorted({stratum(t, stratify_by) for t in trajs})
    col = {s: i for i, s in enumerate(strata)}
    groups: dict[str, list[ProofTrajectory]] = defaultdict(list)
    for t in trajs:
        groups[problem_of[t.problem_id]].append(t)
    pids = sorted(groups)
    random.Random(seed).shuffle(pids)
    counts = np.zeros((len(pids), len(strata)))
    for g, pid in enumerate(pids):
        for t in groups[pid]:
            counts[g, col[stratum(t, stratify_by)]] += 1
    sizes = counts.sum(1)
    target = counts.sum(0) * (size / n if n else 0.0)
    held = np.zeros(len(strata))
    taken = np.zeros(len(pids), dtype=bool)

    def err(v: np.ndarray) -> float:
        return float(((v - target) ** 2).sum())

    # pass 1: seed order, take a problem when it fits and moves the strata towards the target
    for g in range(len(pids)):
        if held.sum() + sizes[g] <= size and err(held + counts[g]) < err(held):
            taken[g] = True
            held += counts[g]
    # pass 2: fill the remaining gap with the best-fitting problems (ties: seed order)
    while held.sum() < size:
        gap = size - held.sum()
        cand = np.flatnonzero(~taken & (sizes <= gap))
        if cand.size == 0:
            break
        scores = ((held + counts[cand] - target) ** 2).sum(1)
        g = int(cand[int(np.argmin(scores))])
        taken[g] = True
        held += counts[g]
    held_set = {pids[g] for g in np.flatnonzero(taken)}
    train = [t for t in trajs if problem_of[t.problem_id] not in held_set]
    held_out = [t for t in trajs if problem_of[t.problem_id] in held_set]
    assert_disjoint(train, held_out)
    return Split(train, held_out, size, list(stratify_by))


def write_split(split: Split, out: str | os.PathLike) -> Path:
    """Assert disjointness, then write ``train.jsonl``, ``held_out.jsonl``, ``split_summary.json``."""
    assert_disjoint(split.train, split.held_out)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "train.jsonl", split.train)
    write_jsonl(out / "held_out.jsonl", split.held_out)
    (out / "split_summary.json").write_text(json.dumps(split.summary(), indent=1) + "\n", encoding="utf-8")
    return out


def run(cfg: SplitConfig) -> Split:
    if not cfg.input or not cfg.out:
        raise InputError("split config: input=PATH and out=DIR are required")
    trajs = load_any(cfg.input).records
    size = None if cfg.held_out_fraction is not None else cfg.held_out_size
    split = split_by_problem(trajs, size, cfg.held_out_fraction, cfg.seed, cfg.stratify_by)
    write_split(split, cfg.out)
    return split


def main() -> None:
    """Hydra app: ``python -m data_pipeline.splits input=PATH out=DIR held_out_size=94``."""

    @hydra_main("split", SplitConfig)
    def _run(cfg: SplitConfig) -> None:
        s = run(cfg).summary()
        print(f"held_out={s['held_out']} (requested {s['requested_held_out']}, {s['held_out_problems']} problems) "
              f"train={s['train']} ({s['train_problems']} problems); no problem on both sides; wrote {cfg.out}")

    _run()


if __name__ == "__main__":
    main()
