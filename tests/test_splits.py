"""Held-out split by problem id: disjoint, stratified, reproducible, 94 by default."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from data_pipeline.splits import SplitConfig, split_by_problem, stratum, write_split
from data_pipeline.synthetic import generate_synthetic
from verifier.config import compose
from verifier.identity import assert_disjoint
from verifier.io import load_trajectories, write_jsonl

REPO = Path(__file__).resolve().parents[1]


def test_disjoint_stratified_reproducible():
    trajs = generate_synthetic(900, seed=1, proofs_per_problem=3, valid_fraction=0.3)
    s = split_by_problem(trajs, held_out_size=94, seed=5)
    assert abs(len(s.held_out) - 94) < 3 and len(s.train) + len(s.held_out) == 900
    assert not {t.problem_id for t in s.train} & {t.problem_id for t in s.held_out}
    keys = ("polarity", "subject")
    whole = Counter(stratum(t, keys) for t in trajs)
    held = Counter(stratum(t, keys) for t in s.held_out)
    for k, c in whole.items():  # each stratum within a few records of its proportional share
        assert abs(held[k] - c * len(s.held_out) / 900) <= 4, (k, held[k], c)
    again = split_by_problem(trajs, held_out_size=94, seed=5)
    assert [t.id for t in again.held_out] == [t.id for t in s.held_out]
    other = split_by_problem(trajs, held_out_size=94, seed=6)
    assert [t.id for t in other.held_out] != [t.id for t in s.held_out]
    frac = split_by_problem(trajs, held_out_size=None, held_out_fraction=0.2, seed=0)
    assert abs(len(frac.held_out) - 180) < 3


def test_leak_is_refused(tmp_path):
    trajs = generate_synthetic(10, seed=0)
    s = split_by_problem(trajs, held_out_size=4)
    s.train.append(s.held_out[0])
    with pytest.raises(ValueError, match="on both sides"):
        write_split(s, tmp_path / "x")
    assert not (tmp_path / "x" / "train.jsonl").exists()
    bad = [trajs[0], trajs[1], trajs[0]]
    with pytest.raises(ValueError, match="duplicate id"):
        split_by_problem(bad, held_out_size=1)
    with pytest.raises(ValueError, match="held_out_size"):
        split_by_problem(trajs, held_out_size=11)
    with pytest.raises(ValueError, match="stratify_by"):
        split_by_problem(trajs, held_out_size=2, stratify_by=["colour"])
    assert_disjoint(s.train[:-1], s.held_out)


def test_config_default_is_94_and_cli(tmp_path):
    cfg = compose("split", SplitConfig)
    assert cfg.held_out_size == 94 and cfg.stratify_by == ["polarity", "subject"]
    write_jsonl(tmp_path / "all.jsonl", generate_synthetic(300, seed=3))
    r = subprocess.run([sys.executable, "-m", "data_pipeline.splits", f"input={tmp_path / 'all.jsonl'}",
                        f"out={tmp_path / 's'}", "seed=2"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    held = load_trajectories(tmp_path / "s" / "held_out.jsonl").records
    train = load_trajectories(tmp_path / "s" / "train.jsonl").records
    assert len(held) == 94 and len(train) == 206
    summary = json.loads((tmp_path / "s" / "split_summary.json").read_text())
    assert summary["held_out"] == 94 and sum(summary["held_out_by_stratum"].values()) == 94
    assert "no problem on both sides" in r.stdout


def test_one_problem_identity_for_ids_texts_and_synthetic_ids():
    """Records whose texts are the same are one problem whatever their ids; synthetic ids are the sha1 ones."""
    import dataclasses
    import hashlib

    from verifier.identity import ProblemIndex, problem_id_of

    trajs = generate_synthetic(40, seed=0)
    twin = dataclasses.replace(trajs[0], id="twin", problem_id="other-id", problem=trajs[0].problem + "  ")
    s = split_by_problem([*trajs, twin], held_out_size=10)
    sides = {t.id: side for side, ts in (("train", s.train), ("held", s.held_out)) for t in ts}
    assert sides["twin"] == sides[trajs[0].id]
    assert_disjoint(s.train, s.held_out)
    assert ProblemIndex([trajs[0]]).shared(twin).startswith("record 'twin', field 'problem'")
    by_text = generate_synthetic(4, seed=0, problem_id_from_text=True)
    assert all(t.problem_id == "syn-" + hashlib.sha1(t.problem.encode()).hexdigest()[:12] ==
               problem_id_of(t.problem, prefix="syn") for t in by_text)
