"""ProverBench: the IMO-ProofBench v2 importer, runs end to end on the session vLLM server (tiny model), and a
thinking prover's proofs judged without their reasoning (issue 42 item 4)."""

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

from verifier.formats import load_proofbench_problems
from verifier.identity import parse_version_id, problem_id_of
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
    assert [t.id for t in proofs] == [f"PB-Basic-00{i}-g0-s{j}-r0" for i in (1, 2, 3) for j in (0, 1)]
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
    assert sorted(r["id"] for r in rows) == [f"PB-Basic-00{i}-g0-s0-r0" for i in (1, 2, 3, 4)]
    clean = run(_cfg(endpoint, csv, tmp_path / "clean", "limit=4", "wandb.enabled=false"))
    # same seeds -> same proofs and the same verdicts
    assert [t.proof_steps for t in load_trajectories(out / "proofs.jsonl").records] == \
        [t.proof_steps for t in load_trajectories(tmp_path / "clean" / "proofs.jsonl").records]
    assert clean["proverbench.acceptance"]["counts"] == doc["proverbench.acceptance"]["counts"]


# ---------------------------------------------------------------------------------------------- thinking provers


class RecordingEngine:
    """A verifier engine that records what it is sent (request key -> prompt): the real served one, or, when
    ``engine`` is None, a fake that accepts every proof."""

    def __init__(self, engine=None):
        self.engine, self.model, self.prompts = engine, getattr(engine, "model", "accept-all"), {}

    async def agenerate(self, requests, sampling):
        from verifier.engine import Completion
        from verifier.parser import format_verification

        self.prompts.update({r.key: r.messages[-1]["content"] for r in requests})
        if self.engine is not None:
            return await self.engine.agenerate(requests, sampling)
        return [[Completion(format_verification("valid", -1, "Every step holds."), "stop")] * r.n for r in requests]

    def generate(self, requests, sampling, progress=False):
        from verifier.engine import run_sync

        return run_sync(self.agenerate(requests, sampling))


class ThinkingProver:
    """A thinking prover (fake generator): problem q0 thinks (a wrong draft) then writes its proof, q1 is cut by
    the token budget inside its thinking, q2 writes its proof without thinking."""

    model = "thinking-prover"

    def generate(self, requests, sampling, progress=False):
        from verifier.engine import Completion

        out = []
        for r in requests:
            i = int(parse_version_id(r.key).problem_id[1:])
            proof = f"Step 0: {i} + {i} = {2 * i}\nStep 1: So {2 * i} is even."
            out.append([[Completion(f"<think>\nStep 0: DRAFT {i} + {i} = {2 * i + 1}?</think>\n{proof}", "stop"),
                         Completion(f"<think>\nStep 0: DRAFT {i} + {i}, hmm", "length"),
                         Completion(proof, "stop")][i]])
        return out

    async def agenerate(self, requests, sampling):
        return self.generate(requests, sampling)


@pytest.mark.parametrize("verifier", ["fake", pytest.param("served", marks=pytest.mark.vllm)])
def test_proverbench_judges_the_proof_after_the_thinking(verifier, request, tmp_path, monkeypatch):
    """Proofs are stored and judged without the thinking; a proof whose thinking never ended is kept, never
    judged (by any pool member, in any round), counted and not accepted; a non-thinking proof is unchanged."""
    import eval.proverbench as pb

    problems, out = tmp_path / "problems.jsonl", tmp_path / "run"
    write_jsonl(problems, [{"id": f"q{i}", "problem": f"Prove that {i} + {i} is even.", "split": s, "subject": "NT"}
                           for i, s in enumerate(["UG", "QE", "UG"])])
    extra = ["wandb.enabled=false", "judge.n=2", "refine.rounds=1",
             "pool.verifiers=[{base_url: 'http://127.0.0.1:9/v1', model: second}]"]
    if verifier == "served":  # the session vLLM server judges (pool member 1 too), steered to accept half the passes
        cfg = _cfg(request.getfixturevalue("endpoint"), problems, out, *extra)
        cfg.pool.verifiers[0] = cfg.verifier
    else:
        cfg = compose("proverbench", ProverBenchConfig, [f"problems={problems}", f"out={out}", "bootstrap_n=50",
                                                         "progress=false", *extra])
    real, recorders = pb.verifier_engine, []

    def recording(cfg, k=0):
        recorders.append(RecordingEngine(real(cfg, k) if verifier == "served" else None))
        return recorders[-1]

    monkeypatch.setattr(pb, "verifier_engine", recording)
    doc = run(cfg, generator_engine=ThinkingProver())
    proofs = {t.id: t for t in load_trajectories(out / "proofs.jsonl").records}
    assert proofs["q0-g0-s0-r0"].proof_steps == ("0 + 0 = 0", "So 0 is even.")  # the thinking is gone
    assert proofs["q2-g0-s0-r0"].proof_steps == ("2 + 2 = 4", "So 4 is even.")  # no thinking: as written
    assert proofs["q1-g0-s0-r0"].proof_steps == ("",) and proofs["q1-g0-s0-r0"].meta["generation_status"] == "unfinished_thinking"
    assert not any(i.startswith("q1-g0-s0-") and i != "q1-g0-s0-r0" for i in proofs)  # never revised: no critique exists
    prompts = {k: p for rec in recorders for k, p in rec.prompts.items()}
    assert prompts and not any(k.startswith("q1/") for k in prompts)  # never sent to a verifier
    assert not any("DRAFT" in p or "think>" in p for p in prompts.values())
    assert all("Step 0: 0 + 0 = 0\nStep 1: So 0 is even." in p for k, p in prompts.items() if k.startswith("q0/"))
    for name in ("judgments.jsonl", "judgments.pool1.jsonl"):
        assert "q1-g0-s0-r0" not in {r["id"] for r in read_jsonl(out / name)}
    c = doc["counts"]
    assert c["proofs"] == 3 and c["unfinished_thinking"] == 1 and c["not_scored"] == 0
    assert c["generation_status"] == {"ok": 2, "unfinished_thinking": 1} and sum(c["judge_status"].values()) == 2
    assert doc["run"]["generation_unfinished_thinking"] == 1
    n_ok = doc["proverbench.acceptance"]["counts"]
    assert n_ok["n"] == 3 and n_ok["accepted"] <= 2
    assert all(m["acceptance"]["counts"]["n"] == 3 for m in doc["pool"]["members"])
    assert all(b["acceptance"]["overall"]["counts"]["n"] == 3 for b in doc["refine"]["by_round"])
    if verifier == "fake":  # the verifier accepts every proof it sees: only the unfinished one is not accepted
        assert n_ok == {"accepted": 2, "n": 3} and doc["refine"]["by_round"][1]["acceptance"]["overall"]["counts"] == \
            {"accepted": 2, "n": 3}
    assert "| unfinished_thinking | 1 |" in (out / "report.md").read_text()
    again = run(cfg, generator_engine=ThinkingProver())  # resume: nothing generated or judged again
    assert again["run"]["generated"] == 0 and again["run"]["judged"] == 0 and again["counts"] == doc["counts"]
    with pytest.raises(ValueError, match="generation.reasoning_format"):
        run(dataclasses.replace(cfg, generation=dataclasses.replace(cfg.generation, reasoning_format="harmony")))
