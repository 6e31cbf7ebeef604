"""Positive-sample augmentation (section 4.2) on the real vLLM server: repair, pessimistic multi-verifier
check, provenance, rejected log, resume after a kill half-way."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_pipeline.augment import AugmentConfig, candidates, run
from verifier.judging import JudgeConfig
from data_pipeline.synthetic import generate_synthetic
from verifier.io import load_trajectories, read_jsonl, write_jsonl

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[1]
REPAIR_REGEX = r"Step 0: [1-9][0-9] \+ [1-9] = [1-9][0-9]\nStep 1: So the answer is [1-9][0-9]\."


def _cfg(endpoint, tmp_path, inp, out, **kw):
    from conftest import LORA_NAME
    from verifier.judging import synthetic_verdict_regex

    gen = dataclasses.replace(endpoint, extra_body={"structured_outputs": {"regex": REPAIR_REGEX}})
    v1 = dataclasses.replace(endpoint, extra_body={"structured_outputs": {"regex": synthetic_verdict_regex(75)}})
    v2 = dataclasses.replace(endpoint, model=LORA_NAME,
                             extra_body={"structured_outputs": {"regex": synthetic_verdict_regex(90)}})
    return AugmentConfig(input=str(inp), out=str(out), generator=gen, verifiers=[v1, v2], max_tokens=48,
                         verify=JudgeConfig(n=2, max_tokens=64, early_stop=True), progress=False, **kw)


@pytest.fixture()
def annotated(tmp_path):
    trajs = generate_synthetic(10, seed=6, valid_fraction=0.2, proofs_per_problem=2)
    rows = [t.to_dict() for t in trajs]
    invalid = [r for r in rows if r["annotation"]["first_fatal_error_step"] != -1]
    invalid[0]["annotation"]["correction"] = ""  # no correction suggestion -> not a candidate
    write_jsonl(tmp_path / "ann.jsonl", rows)
    return tmp_path / "ann.jsonl", trajs


def test_repair_verify_provenance(endpoint, tmp_path, annotated):
    inp, trajs = annotated
    cands, why = candidates(load_trajectories(inp).records)
    assert why["no_correction"] == 1 and why["valid"] == sum(t.annotation.is_valid for t in trajs)
    s = run(_cfg(endpoint, tmp_path, inp, tmp_path / "aug", batch_size=4))
    pos = load_trajectories(tmp_path / "aug" / "positives.jsonl").records
    rej = read_jsonl(tmp_path / "aug" / "rejected.jsonl")
    assert len(pos) + len(rej) == len(cands) == s["candidates"]
    assert pos and rej, (len(pos), len(rej))  # both outcomes occur with these accept rates
    parents = {t.id: t for t in cands}
    for p in pos:
        prov = p.meta["augmentation"]
        parent = parents[prov["parent_id"]]
        assert p.problem_id == parent.problem_id and p.annotation.is_valid and p.source == "repair/synthetic"
        assert p.proof_steps[1].startswith("So the answer is") and len(p.proof_steps) == 2
        assert prov["repair_model"] == endpoint.model and len(prov["verifier_votes"]) == 2
        for v in prov["verifier_votes"]:  # pessimistic: every pass of every verifier accepted
            assert v["accepted"] and v["n_accept"] == v["n_passes"] == 2 and set(v["pass_verdicts"]) == {"valid"}
    for r in rej:
        assert r["reason"] == "verifier_rejected"
        assert any(not v["accepted"] for v in r["verifier_votes"])
        # a non-accepting verifier had a pass that rejected or did not parse (e.g. step_out_of_range)
        assert all(set(v["pass_verdicts"]) != {"valid"} for v in r["verifier_votes"] if not v["accepted"]), r
    summary = json.loads((tmp_path / "aug" / "augment_summary.json").read_text())
    assert summary["positives_total"] == len(pos) and summary["not_candidates"]["no_correction"] == 1
    # a second run has nothing left to do
    s2 = run(_cfg(endpoint, tmp_path, inp, tmp_path / "aug", batch_size=4))
    assert s2["resumed_done"] == len(cands) and s2["this_run"] == {}


def test_resume_after_kill_half_way(endpoint, tmp_path, annotated):
    inp, _ = annotated
    out = tmp_path / "killed"
    cfg = _cfg(endpoint, tmp_path, inp, out, batch_size=1)
    script = tmp_path / "job.py"
    script.write_text(
        "import sys, pickle\nsys.path.insert(0, %r)\nfrom data_pipeline.augment import run\n"
        "run(pickle.load(open(%r, 'rb')))\n" % (str(REPO), str(tmp_path / "cfg.pkl")))
    import pickle

    pickle.dump(cfg, open(tmp_path / "cfg.pkl", "wb"))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    lines = 0
    try:
        while time.time() < deadline and proc.poll() is None:
            lines = sum(len(p.read_text().splitlines()) for p in (out / "positives.jsonl", out / "rejected.jsonl")
                        if p.exists())
            if lines >= 2:
                break
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert lines >= 2, proc.stderr.read().decode()[-2000:]
    n_cands = len(candidates(load_trajectories(inp).records)[0])
    before = {p: p.read_text() for p in (out / "positives.jsonl", out / "rejected.jsonl") if p.exists()}
    done_before = sum(len([x for x in t.splitlines() if x.strip()]) for t in before.values())
    assert done_before < n_cands, "the job finished before it was killed; nothing to resume"
    s = run(cfg)
    assert s["resumed_done"] == done_before
    pos = read_jsonl(out / "positives.jsonl")
    rej = read_jsonl(out / "rejected.jsonl")
    keys = [(r["meta"]["augmentation"]["parent_id"], r["meta"]["augmentation"]["attempt"]) for r in pos] + \
           [(r["parent_id"], r["attempt"]) for r in rej]
    assert len(keys) == len(set(keys)) == n_cands  # every candidate exactly once, nothing redone
    for p, text in before.items():  # rows written before the kill are kept (a torn last line is dropped)
        complete = [x for x in text.splitlines(keepends=True) if x.endswith("\n")]
        assert p.read_text().startswith("".join(complete))


def test_cli_with_the_unguided_tiny_model(endpoint, tmp_path, annotated):
    """The Hydra app end to end; random weights give unparseable verifications, so nothing is accepted."""
    inp, _ = annotated
    env = {**os.environ, "VERIFIER_API_KEY": endpoint.resolved_api_key()}
    r = subprocess.run([sys.executable, "-m", "data_pipeline.augment", f"input={inp}", f"out={tmp_path / 'cli'}",
                        f"generator.base_url={endpoint.base_url}", f"generator.model={endpoint.model}",
                        f"verifiers=[{{base_url: '{endpoint.base_url}', model: '{endpoint.model}'}}]",
                        "verify.n=2", "verify.max_tokens=32", "max_tokens=32", "limit=2", "progress=false"],
                       cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "positives=0 rejected=2" in r.stdout
    for row in read_jsonl(tmp_path / "cli" / "rejected.jsonl"):
        assert row["reason"] in ("verifier_rejected", "unparseable_repair")


def test_exact_checker_as_the_strong_model(endpoint, tmp_path):
    """``check=exact``: the synthetic task's exact checker decides (no verifier endpoint is asked); a repair is kept
    exactly when it is true. The generator is steered to write two-step repairs of "Compute A + B." problems, some
    of which are right."""
    from data_pipeline.synthetic_check import check_proof

    trajs = generate_synthetic(40, seed=3, valid_fraction=0.0, min_steps=2, max_steps=2, ops="+", max_operand=9,
                               min_operand=1, proofs_per_problem=1, recoverable_rate=0.0, subjects=["arithmetic"])
    trajs = trajs[:12]
    write_jsonl(tmp_path / "ann.jsonl", [t.to_dict() for t in trajs])
    regex = r"Step 0: [1-9] \+ [1-9] = [1-9][0-9]?\nStep 1: So the answer is [1-9][0-9]?\."
    gen = dataclasses.replace(endpoint, extra_body={"structured_outputs": {"regex": regex}})
    dead = dataclasses.replace(endpoint, base_url="http://127.0.0.1:9/v1")  # never asked
    s = run(AugmentConfig(input=str(tmp_path / "ann.jsonl"), out=str(tmp_path / "aug"), generator=gen,
                          verifiers=[dead], check="exact", attempts=4, max_tokens=32, progress=False))
    assert s["check"] == "exact" and s["verifiers"] == ["exact-checker"]
    pos = load_trajectories(tmp_path / "aug" / "positives.jsonl").records
    rej = read_jsonl(tmp_path / "aug" / "rejected.jsonl")
    assert len(pos) + len(rej) == 12 * 4
    assert all(check_proof(p.problem, p.proof_steps).true for p in pos)
    for r in rej:
        assert r["reason"] == "verifier_rejected" and r["verifier_votes"][0]["verifier"] == "exact-checker"
        assert r["verifier_votes"][0]["reason"]
    with pytest.raises(Exception, match="check"):
        run(AugmentConfig(input=str(tmp_path / "ann.jsonl"), out=str(tmp_path / "x"), check="oracle"))
