"""Verifier-uncertainty selection: entropy, problem/proof filters, budget + cap, engine path on vLLM, resume."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from data_pipeline.selection import SelectConfig, run, score, select
from verifier.judging import JudgeConfig
from data_pipeline.synthetic import generate_synthetic
from verifier.io import read_jsonl, write_jsonl

REPO = Path(__file__).resolve().parents[1]


def jrow(rid, verdicts):
    """An eval.judge row from a verdict string: v = valid, i<k> = invalid at step k, ? = unparseable."""
    passes = []
    for i, v in enumerate(verdicts.split()):
        if v == "v":
            passes.append({"index": i, "verdict": "valid", "first_error_step": -1, "parse_status": "ok", "text": ""})
        elif v == "?":
            passes.append({"index": i, "verdict": None, "first_error_step": -1, "parse_status": "no_answer_block",
                           "text": "junk"})
        else:
            passes.append({"index": i, "verdict": "invalid", "first_error_step": int(v[1:]), "parse_status": "ok",
                           "text": ""})
    return {"id": rid, "passes": passes}


def test_filters_budget_and_cap():
    trajs = generate_synthetic(12, seed=0, proofs_per_problem=3)  # 4 problems x 3 proofs
    ids = [t.id for t in trajs]
    rows = [
        jrow(ids[0], "v v v v"), jrow(ids[1], "v v v v"), jrow(ids[2], "v v v v"),   # easy problem: dropped
        jrow(ids[3], "v v i0 i0"), jrow(ids[4], "v v v i1"), jrow(ids[5], "i2 i2 i2 i2"),  # 1.0, .81, trivial
        jrow(ids[6], "v i0 v i0"), jrow(ids[7], "v ? i0 i0"), jrow(ids[8], "v v v v"),  # 1.0, 1.5, trivial
        jrow(ids[9], "v v v i0"),  # ids[10], ids[11]: no judgment
    ]
    df = select(trajs, rows, SelectConfig(budget=3, per_problem_cap=1))
    st = dict(zip(df["id"], df["status"].astype(str)))
    ent = dict(zip(df["id"], df["entropy"]))
    assert math.isclose(ent[ids[7]], 1.5) and math.isclose(ent[ids[4]], -(.75 * math.log2(.75) + .25 * math.log2(.25)))
    assert [st[i] for i in ids[:3]] == ["dropped_easy_problem"] * 3
    assert st[ids[5]] == st[ids[8]] == "dropped_trivial"
    assert st[ids[10]] == st[ids[11]] == "no_judgment"
    # per problem the most uncertain is taken (cap 1): ids[7] (1.5), ids[3] (1.0), ids[9] (.81)
    assert {i for i, s in st.items() if s == "selected"} == {ids[7], ids[3], ids[9]}
    assert st[ids[4]] == st[ids[6]] == "over_problem_cap"
    df2 = select(trajs, rows, SelectConfig(budget=2))
    sel = df2[df2["status"] == "selected"].sort_values("rank")
    assert list(sel["id"])[0] == ids[7] and len(sel) == 2
    assert (df2["status"] == "over_budget").sum() == 3
    # verdict_step: disagreeing steps are uncertainty too; ignore: the unparseable pass is left out
    df3 = select(trajs, rows, SelectConfig(outcome="verdict_step", unparseable="ignore"))
    e3 = dict(zip(df3["id"], df3["entropy"]))
    assert math.isclose(e3[ids[7]], -(1 / 3 * math.log2(1 / 3) + 2 / 3 * math.log2(2 / 3)))
    with pytest.raises(ValueError, match="not in the input"):
        select(trajs, rows + [jrow("ghost", "v")], SelectConfig())


def test_config_mirrors_schema():
    from verifier.config import compose

    cfg = compose("select", SelectConfig, ["judge.n=4", "budget=10", "per_problem_cap=2", "outcome=verdict_step"])
    assert isinstance(cfg, SelectConfig) and isinstance(cfg.judge, JudgeConfig)
    assert (cfg.judge.n, cfg.budget, cfg.per_problem_cap, cfg.outcome, cfg.endpoint.model) == \
        (4, 10, 2, "verdict_step", "artifacts/tiny-model")


def test_vectorised_matches_per_trajectory_reference():
    rng = np.random.default_rng(1)
    n_traj, passes = 400, 6
    trajs = pd.DataFrame({"id": [f"t{i}" for i in range(n_traj)], "problem_id": [f"p{i // 3}" for i in range(n_traj)]})
    v = rng.choice([1, 0, -1], size=n_traj * passes, p=[.5, .4, .1])
    v[: 3 * passes] = 1  # one easy problem
    s = np.where(v == 0, rng.integers(0, 3, v.size), -1)
    rows = pd.DataFrame({"traj": np.repeat(np.arange(n_traj), passes), "verdict": v, "step": s})
    for outcome in ("verdict", "verdict_step"):
        for unp in ("category", "reject", "ignore"):
            df = score(rows, trajs, SelectConfig(outcome=outcome, unparseable=unp, per_problem_cap=2, budget=50))
            for i in range(0, n_traj, 7):
                r = rows[rows["traj"] == i]
                keys = []
                for vv, ss in zip(r["verdict"], r["step"]):
                    if vv < 0 and unp == "ignore":
                        continue
                    vv = 0 if (vv < 0 and unp == "reject") else vv
                    keys.append((vv, ss if (outcome == "verdict_step" and vv == 0) else None))
                c = Counter(keys)
                want = -sum(k / len(keys) * math.log2(k / len(keys)) for k in c.values())
                assert math.isclose(df["entropy"].iloc[i], want, abs_tol=1e-9), (outcome, unp, i)
            sel = df[df["status"] == "selected"]
            assert len(sel) == 50 and sel.groupby("problem_id").size().max() <= 2
            assert sel["entropy"].min() >= df.loc[df["status"] == "over_budget", "entropy"].max()
            assert (df.loc[df["problem_id"] == "p0", "status"] == "dropped_easy_problem").all()


@pytest.mark.vllm
def test_engine_path_on_vllm_resume_and_cli(endpoint, tmp_path):
    """n guided passes per trajectory on the real server; judgments persisted and resumed; CLI reads them."""
    from verifier.judging import synthetic_verdict_regex

    trajs = generate_synthetic(10, seed=8, proofs_per_problem=2)
    write_jsonl(tmp_path / "cand.jsonl", trajs)
    ep = dataclasses.replace(endpoint, extra_body={"structured_outputs": {"regex": synthetic_verdict_regex(60)}})
    cfg = SelectConfig(trajectories=str(tmp_path / "cand.jsonl"), out=str(tmp_path / "sel"), endpoint=ep,
                       judge=JudgeConfig(n=4, max_tokens=64, run_seed=1),
                       cache=str(tmp_path / "passes.sqlite"), budget=4, per_problem_cap=1,
                       progress=False)
    df = run(cfg)
    judged = read_jsonl(tmp_path / "sel" / "judgments.jsonl")
    assert len(judged) == 10 and all(len(r["passes"]) == 4 for r in judged)
    assert sum(p["parse_status"] == "ok" for r in judged for p in r["passes"]) == 40
    assert (df["n_passes"] == 4).all() and df["entropy"].max() > 0
    queue = read_jsonl(tmp_path / "sel" / "annotation_queue.jsonl")
    assert len(queue) == (df["status"] == "selected").sum() <= 4
    assert len({q["problem_id"] for q in queue}) == len(queue) and all("selection" in q["meta"] for q in queue)
    assert (tmp_path / "sel" / "entropy.png").stat().st_size > 0
    # the prompt is the configured verifier's, recorded per row and in the summary (issue 14.5)
    assert all(r["template"] == "verify" and r["with_reference"] is True for r in judged)
    summ = json.loads((tmp_path / "sel" / "selection_summary.json").read_text())
    assert summ["judge"]["template"] == "verify" and summ["judge"]["prompts_with_reference"] == 10
    # crash half-way: keep 4 judgments and a torn line; the re-run judges only the 6 missing, same result
    lines = (tmp_path / "sel" / "judgments.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "sel" / "judgments.jsonl").write_text("".join(lines[:4]) + lines[4][:30])
    df_again = run(dataclasses.replace(cfg, progress=False))
    again = read_jsonl(tmp_path / "sel" / "judgments.jsonl")
    assert len(again) == 10
    assert df_again.sort_values("id")["entropy"].tolist() == df.sort_values("id")["entropy"].tolist()
    first = {r["id"]: r["passes"] for r in judged}
    assert {r["id"]: r["passes"] for r in again} == first  # re-judged passes come from the cache
    # CLI over the judgments file gives the same scores
    r = subprocess.run([sys.executable, "-m", "data_pipeline.selection", f"trajectories={tmp_path / 'cand.jsonl'}",
                        f"judgments={tmp_path / 'sel' / 'judgments.jsonl'}", f"out={tmp_path / 'cli'}", "budget=4",
                        "per_problem_cap=1", "plot=false"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    cli = pd.read_parquet(tmp_path / "cli" / "scores.parquet")
    assert cli.sort_values("id")["entropy"].tolist() == df.sort_values("id")["entropy"].tolist()
    s = json.loads((tmp_path / "cli" / "selection_summary.json").read_text())
    assert s["selected"] == len(queue) and sum(s["status"].values()) == 10


def test_entropy_bits_is_scipy_entropy_with_empty_rows_zero():
    from scipy.stats import entropy

    from data_pipeline.selection import entropy_bits

    counts = np.random.default_rng(0).integers(0, 5, size=(200, 6))
    counts[:3] = 0  # no counted pass: entropy 0, not NaN
    got = entropy_bits(counts)
    want = [entropy(c, base=2) if c.sum() else 0.0 for c in counts]
    assert np.allclose(got, want, atol=1e-12) and not np.isnan(got).any()
    with pytest.raises(ValueError, match="negative"):
        entropy_bits(np.array([[2, -1]]))
def _file_cfg(tmp_path, rows, **kw):
    trajs = generate_synthetic(3, seed=1, proofs_per_problem=1)
    write_jsonl(tmp_path / "cand.jsonl", trajs)
    write_jsonl(tmp_path / "judge.jsonl", rows(trajs))
    return trajs, SelectConfig(trajectories=str(tmp_path / "cand.jsonl"), judgments=str(tmp_path / "judge.jsonl"),
                               out=str(tmp_path / "sel"), plot=False, progress=False, **kw)


def test_early_stopped_judgments_are_refused(tmp_path):
    """Issue 14.5: an early-stopped judgment (1 rejecting pass of n) is not scored as 1-pass certainty."""
    def rows(trajs):
        out = [{**jrow(t.id, "v i1 v i0"), "template": "verify", "with_reference": True} for t in trajs]
        out[1] = {**jrow(trajs[1].id, "i0"), "early_stopped": True, "template": "verify", "with_reference": True}
        return out

    trajs, cfg = _file_cfg(tmp_path, rows)
    with pytest.raises(ValueError, match=rf"{trajs[1].id}.*'early_stopped'"):
        run(cfg)
    assert not (tmp_path / "sel" / "scores.parquet").exists()
    # the engine path refuses early stop before any request is sent (nothing listens on this port)
    dead = dataclasses.replace(cfg, judgments=None, judge=JudgeConfig(early_stop=True),
                               endpoint=dataclasses.replace(cfg.endpoint, base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(ValueError, match="judge.early_stop"):
        run(dead)
    assert not (tmp_path / "sel" / "judgments.jsonl").exists()


def test_selection_prompt_is_the_configured_verifiers_and_recorded(tmp_path):
    """Issue 14.5: the rows' prompt (template, reference solution) must be the configured one; the summary says which."""
    def rows(trajs):
        return [{**jrow(t.id, "v i1 v v"), "template": "verify", "with_reference": True} for t in trajs]

    trajs, cfg = _file_cfg(tmp_path, rows)
    run(cfg)
    s = json.loads((tmp_path / "sel" / "selection_summary.json").read_text())
    assert s["judge"]["template"] == "verify" and s["judge"]["with_reference"] is True
    assert s["judge"]["prompts_with_reference"] == 3 and s["judge"]["early_stop"] is False
    assert s["judge"]["source"] == cfg.judgments
    with pytest.raises(ValueError, match=rf"{trajs[0].id}.*'template'.*verify_compact"):
        run(dataclasses.replace(cfg, judge=JudgeConfig(template="verify_compact")))
    with pytest.raises(ValueError, match=rf"{trajs[0].id}.*'with_reference'"):
        run(dataclasses.replace(cfg, judge=JudgeConfig(with_reference=False)))
    # the Hydra keys of the one judge config reach selection
    from verifier.config import compose

    c = compose("select", SelectConfig, ["judge.template=verify_compact", "judge.with_reference=false"])
    assert (c.judge.template, c.judge.with_reference, c.judge.early_stop) == ("verify_compact", False, False)
