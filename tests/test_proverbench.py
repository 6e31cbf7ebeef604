"""ProverBench: the IMO-ProofBench v2 importer, and runs end to end on the session vLLM server (tiny model)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verifier.formats import load_proofbench_problems
from verifier.identity import problem_id_of
from eval.proverbench import ProverBenchConfig, run
from verifier.config import compose
from verifier.io import load_trajectories, read_jsonl, write_jsonl
from verifier.judging import synthetic_verdict_regex
from verifier.records import RecordError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def csv(shared_data):
    return shared_data / "imo_proofbench_v2" / "proofbench_v2.csv"


def test_imo_proofbench_importer(csv):
    ps = load_proofbench_problems(csv)
    assert len(ps) == 60 and len({p.id for p in ps}) == 60
    assert {p.split for p in ps} == {"pre-IMO", "IMO-easy", "IMO-medium", "IMO-hard"}
    assert {p.subject for p in ps} == {"Algebra", "Combinatorics", "Geometry", "Number theory"}
    assert all(p.reference_solution and p.problem and p.grading_guidelines for p in ps)
    assert ps[0].id == "PB-Basic-001"


def test_jsonl_problem_importer_errors(tmp_path):
    good = tmp_path / "p.jsonl"
    write_jsonl(good, [{"id": "a", "problem": "Show 1+1=2.", "split": "UG", "subject": "Arithmetic"},
                       {"problem_id": "b", "problem": "P", "solution": "ref"}])
    ps = load_proofbench_problems(good)
    assert [p.id for p in ps] == ["a", "b"] and ps[1].reference_solution == "ref" and ps[0].split == "UG"
    # a problem without an id gets the one derived from its text (the id every leak check uses; issue 26.4)
    write_jsonl(good, [{"problem": "Show 1+1=2."}])
    assert [p.id for p in load_proofbench_problems(good)] == [problem_id_of("Show 1+1=2.")]
    for rows, match in (([{"id": "a", "problem": ""}], "record 'a', field 'problem'"),
                        ([{"id": "a", "problem": "x"}, {"id": "a", "problem": "y"}], "record 'a', field 'id': duplicate"),
                        ([{"id": "a", "problem": "x", "level": "UG"}], "record 'a', field 'level': unknown field"),
                        ([{"id": "a", "problem": "x", "split": 3}], "record 'a', field 'split'")):
        bad = tmp_path / "bad.jsonl"
        write_jsonl(bad, rows)
        with pytest.raises(RecordError, match=match):
            load_proofbench_problems(bad)


def _overrides(endpoint, problems, out, *extra):
    ep = [f"base_url={endpoint.base_url}", f"api_key={endpoint.api_key}", f"model={endpoint.model}", "max_retries=1"]
    return [f"problems={problems}", f"out={out}", *(f"generator.{x}" for x in ep), *(f"verifier.{x}" for x in ep),
            "generation.max_tokens=48", "judge.max_tokens=64", "judge.run_seed=2", "bootstrap_n=100",
            "progress=false", *extra]


def _cfg(endpoint, problems, out, *extra):
    cfg = compose("proverbench", ProverBenchConfig, _overrides(endpoint, problems, out, *extra))
    cfg.verifier.extra_body = {"structured_outputs": {"regex": synthetic_verdict_regex(93, max_step=0)}}
    return cfg


@pytest.mark.vllm
def test_proverbench_end_to_end_on_imo_proofbench(endpoint, csv, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "run"
    doc = run(_cfg(endpoint, csv, out, "limit=3", "proofs_per_problem=2"))
    proofs = load_trajectories(out / "proofs.jsonl").records
    assert [t.id for t in proofs] == [f"PB-Basic-00{i}/g{j}" for i in (1, 2, 3) for j in (0, 1)]
    assert all(t.generator == endpoint.model and t.split and t.subject for t in proofs)
    assert all(t.reference_solution for t in proofs)  # IMO-ProofBench carries reference solutions
    rows = read_jsonl(out / "judgments.jsonl")
    assert len(rows) == 6
    for r in rows:
        assert r["n"] == 8 and r["policy"] == "pessimistic" and r["with_reference"] is True
        assert len(r["passes"]) == 8  # all 8 passes kept (no early stop), for the k-curve
        assert (r["verdict"] == "valid") == all(p["verdict"] == "valid" for p in r["passes"])
    accepted = sum(r["verdict"] == "valid" for r in rows)
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["proverbench.acceptance"]["counts"] == {"accepted": accepted, "n": 6}
    assert saved["proverbench.acceptance"]["value"] == pytest.approx(accepted / 6)
    by_split = saved["acceptance"]["split"]
    assert sum(m["counts"]["n"] for m in by_split.values()) == 6
    assert set(saved["acceptance"]["subject"]) <= {"Algebra", "Combinatorics", "Geometry", "Number theory"}
    assert doc["counts"]["problems"] == 3 and doc["passes"] == 8
    assert doc["counts"]["unparseable_passes"] == 0  # guided verifier, error step 0 exists in every proof
    pess = [r for r in doc["k_curve"] if r["policy"] == "pessimistic"]
    assert [r["k"] for r in pess] == list(range(1, 9))
    vals = [r["acceptance"]["value"] for r in pess]
    assert vals == sorted(vals, reverse=True) and vals[-1] == pytest.approx(accepted / 6)
    md = (out / "report.md").read_text()
    assert "ProverBench: pessimistic acceptance" in md and "![acceptance by split](acceptance.png)" in md
    assert "(browser/index.html)" in md and (out / "browser" / "index.html").exists()
    assert (out / "acceptance.png").read_bytes()[:4] == b"\x89PNG" and (out / "k_curve.png").exists()
    assert list((out / "wandb").glob("offline-run-*"))
    # a second run with more problems reuses what is there and only adds the new ones
    doc2 = run(_cfg(endpoint, csv, out, "limit=4", "proofs_per_problem=2", "wandb.enabled=false"))
    assert doc2["run"]["proofs_already_done"] == 6 and doc2["run"]["generated"] == 2
    assert doc2["run"]["judgments_already_done"] == 6 and doc2["run"]["judged"] == 2 and doc2["n"] == 8


@pytest.mark.vllm
def test_proverbench_jsonl_problems_without_reference(endpoint, tmp_path):
    problems = tmp_path / "problems.jsonl"
    write_jsonl(problems, [{"id": f"q{i}", "problem": f"Prove that {i} + {i} is even.", "split": s, "subject": "NT"}
                           for i, s in enumerate(["UG", "QE", "UG"])])
    doc = run(_cfg(endpoint, problems, tmp_path / "run", "wandb.enabled=false", "judge.n=2"))
    rows = read_jsonl(tmp_path / "run" / "judgments.jsonl")
    assert [r["with_reference"] for r in rows] == [False] * 3
    assert set(doc["acceptance"]["split"]) == {"UG", "QE"} and doc["acceptance"]["split"]["UG"]["counts"]["n"] == 2
    assert "proverbench.acceptance.split.QE" in doc


@pytest.mark.vllm
@pytest.mark.slow
def test_proverbench_resumes_after_kill(endpoint, csv, tmp_path):
    """SIGKILL during judging; the re-run finishes with every proof once and the same decisions as a clean run."""
    out = tmp_path / "killed"
    # one proof in flight at a time: the judgments arrive one by one, so the kill lands mid-run (with all four
    # in flight they can all be written within the 50 ms between two looks at the file)
    args = _overrides(endpoint, csv, out, "limit=4", "chunk_size=1", "wandb.enabled=false", "judge.max_concurrency=1",
                      "+verifier.extra_body.structured_outputs.regex='" + synthetic_verdict_regex(93, max_step=0)
                      .replace("\n", "\\n") + "'")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "eval.proverbench", *args]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    judgments = out / "judgments.jsonl"
    t0 = time.time()
    while time.time() - t0 < 180:
        if judgments.exists() and len(judgments.read_text().splitlines()) >= 1:
            break
        if proc.poll() is not None:
            pytest.fail(f"finished before it could be killed: {proc.stdout.read()}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_judged = len(judgments.read_text().splitlines())
    assert 1 <= n_judged < 4
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].startswith("wrote ")
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["run"]["proofs_already_done"] == 4 and doc["run"]["generated"] == 0
    assert doc["run"]["judgments_already_done"] >= n_judged
    rows = read_jsonl(judgments)
    assert sorted(r["id"] for r in rows) == [f"PB-Basic-00{i}/g0" for i in (1, 2, 3, 4)]
    clean = run(_cfg(endpoint, csv, tmp_path / "clean", "limit=4", "wandb.enabled=false"))
    # same seeds -> same proofs and the same verdicts
    assert [t.proof_steps for t in load_trajectories(out / "proofs.jsonl").records] == \
        [t.proof_steps for t in load_trajectories(tmp_path / "clean" / "proofs.jsonl").records]
    assert clean["proverbench.acceptance"]["counts"] == doc["proverbench.acceptance"]["counts"]
