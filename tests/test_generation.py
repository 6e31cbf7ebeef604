"""THE generation runner (``verifier.generation.generate``) and the commands on it (candidates, augment),
on a fake engine (no server): each (problem, sample) written once, resume after a kill half-way, the
``condition`` / ``outcome`` / ``rejects`` hooks, and the keep/skip decisions (pure functions)."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from data_pipeline import augment, candidates
from data_pipeline.augment import AugmentConfig, repair_fate, verification_fate
from data_pipeline.candidates import CandidatesConfig, CriticConfig, revision_fate, version_fate
from data_pipeline.synthetic import generate_synthetic
from verifier.config import EndpointConfig, Sampling
from verifier.engine import Completion, GenerationRequest
from verifier.formats import ProofProblem
from verifier.generation import GenerationConfig, GenTask, Outcome, generate, outcome_counts, tasks_for
from verifier.identity import VersionId, parse_version_id, repair_id, version_id
from verifier.io import read_jsonl, write_jsonl
from verifier.judging import JudgeConfig

REPO = Path(__file__).resolve().parents[1]


class FakeEngine:
    """A deterministic prover/verifier: a verification prompt (it names ``final_answer``) gets a verdict
    (valid when the seed is even), any other prompt a two-step proof naming its key and seed."""

    def __init__(self, model: str = "fake", delay: float = 0.0, fail: set[str] | None = None,
                 empty: set[str] | None = None):
        self.model, self.delay = model, delay
        self.fail, self.empty = fail or set(), empty or set()
        self.keys: list[str] = []

    def _one(self, r: GenerationRequest, i: int) -> Completion:
        seed = (r.seed or 0) + i
        if r.key in self.fail:
            return Completion(status="request_failed", error="connection refused")
        if r.key in self.empty:
            return Completion("", "stop")
        if any("final_answer" in (m.get("content") or "") for m in r.messages):
            ok = seed % 2 == 0
            return Completion(("Each step follows." if ok else "Step 0 does not follow.") + "\n<final_answer>\n"
                              + ("verdict: valid\nfirst_error_step: -1" if ok else "verdict: invalid\nfirst_error_step: 0")
                              + "\n</final_answer>", "stop")
        return Completion(f"Step 0: {r.key} with seed {seed}\nStep 1: So the answer is 42.", "stop")

    def generate(self, requests, sampling: Sampling, progress: bool = False) -> list[list[Completion]]:
        time.sleep(self.delay)
        self.keys += [r.key for r in requests]
        return [[self._one(r, i) for i in range(r.n)] for r in requests]

    async def agenerate(self, requests, sampling: Sampling) -> list[list[Completion]]:
        return self.generate(requests, sampling)


def _problems(n: int = 4) -> list[ProofProblem]:
    return [ProofProblem(f"p{i}", f"Prove that {2 * i} is even.") for i in range(n)]


def _complete_text(p: Path) -> str:
    return "".join(x for x in p.read_text().splitlines(keepends=True) if x.endswith("\n")) if p.exists() else ""


def _kill_when(script: str, files: list[Path], lines: int, tmp_path: Path) -> dict[Path, str]:
    """Run ``script`` in a fresh interpreter, SIGKILL it once ``files`` hold ``lines`` lines; their complete lines."""
    (tmp_path / "job.py").write_text(f"import sys\nsys.path[:0] = [{str(REPO)!r}, {str(REPO / 'tests')!r}]\n" + script)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "job.py")], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    n, deadline = 0, time.time() + 120
    try:
        while time.time() < deadline and proc.poll() is None:
            n = sum(len(p.read_text().splitlines()) for p in files if p.exists())
            if n >= lines:
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert n >= lines, proc.stderr.read().decode()[-2000:]
    return {p: _complete_text(p) for p in files}


def _kill_command(module: str, cfg, delay: float, files: list[Path], lines: int, tmp_path: Path) -> dict[Path, str]:
    """``module.run(cfg)`` with a slow fake engine in a fresh interpreter, killed once ``files`` hold ``lines``."""
    (tmp_path / "cfg.pkl").write_bytes(pickle.dumps(cfg))
    script = (f"import pickle\nfrom test_generation import FakeEngine\nimport {module} as m\n"
              f"m.OpenAIEngine = lambda ep: FakeEngine(ep.model, delay={delay})\n"
              f"m.run(pickle.load(open({str(tmp_path / 'cfg.pkl')!r}, 'rb')))\n")
    return _kill_when(script, files, lines, tmp_path)


# --- the runner ------------------------------------------------------------------------------------

def test_each_task_once_failed_requests_retried(tmp_path):
    out = tmp_path / "proofs.jsonl"
    tasks = tasks_for(_problems(), samples=3)
    eng = FakeEngine(fail={"p1-g0-s0-r0", "p2-g0-s2-r0"})
    s = generate(tasks, eng, GenerationConfig(chunk_size=5), out, progress=False)
    assert (s["tasks"], s["already_done"], s["generated"], s["failed"], s["truncated"]) == (12, 0, 10, 2, 0)
    first = {r["id"]: r for r in read_jsonl(out)}
    s = generate(tasks, FakeEngine(), GenerationConfig(chunk_size=2), out, progress=False)  # other chunking
    assert (s["already_done"], s["generated"], s["failed"]) == (10, 2, 0)
    rows = read_jsonl(out)
    assert sorted(r["id"] for r in rows) == sorted(t.id for t in tasks)  # each (problem, sample) once
    assert all(first[r["id"]] == r for r in rows if r["id"] in first)
    # the seed is the task's: the retried proofs are those a single run would have written
    alone = tmp_path / "alone.jsonl"
    generate(tasks, FakeEngine(), GenerationConfig(chunk_size=12), alone, progress=False)
    assert {r["id"]: r["proof_steps"] for r in read_jsonl(alone)} == {r["id"]: r["proof_steps"] for r in rows}
    s = generate(tasks, FakeEngine(), GenerationConfig(), out, progress=False)
    assert s["already_done"] == 12 and outcome_counts(s) == dict.fromkeys(("generated", "failed", "truncated",
                                                                           "too_long", "unfinished_thinking"), 0)
    with pytest.raises(ValueError, match="duplicate"):
        generate(tasks + tasks[:1], FakeEngine(), GenerationConfig(), out, progress=False)


def test_killed_half_way_resumes_each_task_once(tmp_path):
    out = tmp_path / "proofs.jsonl"
    script = ("from test_generation import FakeEngine, _problems\n"
              "from verifier.generation import GenerationConfig, generate, tasks_for\n"
              f"generate(tasks_for(_problems(10), 2), FakeEngine(delay=0.2), GenerationConfig(chunk_size=1), "
              f"{str(out)!r}, progress=False)\n")
    before = _kill_when(script, [out], 4, tmp_path)[out]
    n_before = len(before.splitlines())
    assert n_before < 20, "the job finished before it was killed; nothing to resume"
    with open(out, "a") as f:  # a torn last line, as a kill during a write leaves it
        f.write('{"id": "p9/g1", "proof')
    s = generate(tasks_for(_problems(10), 2), FakeEngine(), GenerationConfig(chunk_size=3), out, progress=False)
    assert s["already_done"] == n_before and s["generated"] == 20 - n_before
    assert out.read_text().startswith(before)
    ids = [r["id"] for r in read_jsonl(out)]
    assert len(ids) == len(set(ids)) == 20


def test_condition_outcome_and_rejects_hooks(tmp_path):
    """A condition decides some tasks without generating (skip rows, retries); the outcome writes the
    others to ``out`` or ``rejects``; both files count as done, retries come back."""
    out, rej = tmp_path / "kept.jsonl", tmp_path / "skipped.jsonl"
    tasks = [GenTask(p, s, key=f"{p.id}:{s}", model="m-lora", meta={"n": s}) for p in _problems(3) for s in range(4)]
    retry = {"p0:3"}

    def condition(chunk):
        return [Outcome({"id": t.id, "reason": "odd"}, rejected=True, counts={"odd": 1}) if t.sample % 2 else
                Outcome(counts={"later": 1}) if t.id in retry else t for t in chunk]

    def outcome(pairs):
        return [Outcome({"id": t.id, "text": c.text, "n": t.meta["n"]}, rejected=t.sample == 2,
                        counts={"kept" if t.sample != 2 else "two": 1}) for t, c in pairs]

    eng = FakeEngine()
    s = generate(tasks, eng, GenerationConfig(chunk_size=4), out, prompt=lambda t: f"prove {t.id}",
                 condition=condition, outcome=outcome, rejects=rej, progress=False)
    assert outcome_counts(s) == {"odd": 6, "kept": 3, "two": 3}
    assert sorted(eng.keys) == sorted(t.id for t in tasks if t.sample % 2 == 0)
    assert {r["id"] for r in read_jsonl(out)} == {f"p{i}:0" for i in range(3)}
    assert Counter(r.get("reason", "two") for r in read_jsonl(rej)) == {"odd": 6, "two": 3}
    retry.clear()
    s = generate(tasks, FakeEngine(), GenerationConfig(), out, condition=condition, outcome=outcome, rejects=rej,
                 progress=False)
    assert s["already_done"] == 12 and outcome_counts(s) == {}
    with pytest.raises(ValueError, match="rejects=PATH"):
        generate(tasks, FakeEngine(), GenerationConfig(), tmp_path / "x.jsonl", outcome=outcome, progress=False)


# --- the one proof-version id ---------------------------------------------------------------------

def test_version_id_build_and_parse():
    """One format (the candidates'): round 0 keeps its ``-r0``; problem ids with dashes and slashes parse back;
    every command's tasks are named by it (ProverBench, refine, candidates with their generator index)."""
    assert version_id("PB-Basic-001", 0) == "PB-Basic-001-g0-s0-r0"
    assert version_id("p1", 2, 1, generator=3) == "p1-g3-s2-r1"
    for pid in ("p1", "PB-Basic-001", "a-g1-s2-r3", "x/y", "prob-0123abcd"):
        for g, s, r in ((0, 0, 0), (1, 7, 2), (12, 3, 10)):
            vid = version_id(pid, s, r, generator=g)
            assert parse_version_id(vid) == VersionId(pid, g, s, r)
    assert GenTask(ProofProblem("q", "Q"), 2, 1).id == "q-g0-s2-r1"
    assert GenTask(ProofProblem("q", "Q"), 2, 1, generator=4).id == "q-g4-s2-r1"
    assert GenTask(ProofProblem("q", "Q"), 2, key="k").id == "k"
    for other in ("t1", "q/g0", "q/g0/r1", "q-g0-s0", repair_id("q-g0-s0-r0", 0), "q-gx-s0-r0"):
        assert parse_version_id(other) is None, other
    with pytest.raises(ValueError, match="sample"):
        version_id("q", -1)


# --- keep/skip decisions (pure) -----------------------------------------------------------------------

def test_candidate_decisions():
    assert version_fate(Completion("Step 0: a\nStep 1: b", "length")) == "keep"
    assert version_fate(Completion("\n\n", "stop")) == "empty_proof"
    assert version_fate(Completion(status="too_long", error="prompt too long")) == "prompt_too_long"
    assert version_fate(Completion(status="request_failed")) == "retry"
    crit = {"status": "ok", "n_passes": 2, "n_unparseable": 1, "accepted": False}
    assert revision_fate(crit, True) == "revise"
    assert revision_fate({**crit, "accepted": True}, True) == "accepted_by_critic"
    assert revision_fate({**crit, "accepted": True}, False) == "revise"
    assert revision_fate({**crit, "n_unparseable": 2}, True) == "critic_failed"
    assert revision_fate({**crit, "status": "request_failed"}, True) == "retry"


def test_repair_decisions():
    assert repair_fate(Completion("Step 0: a\nStep 1: b"), ["a", "b"], 2) == "verify"
    assert repair_fate(Completion("Step 0: a"), ["a"], 2) == "unparseable_repair"
    assert repair_fate(Completion(" "), [" "], 1) == "unparseable_repair"
    assert repair_fate(Completion(status="too_long"), [], 1) == "prompt_too_long"
    assert repair_fate(Completion(status="request_failed"), [], 1) == "retry"
    ok, no = {"status": "ok", "accepted": True}, {"status": "ok", "accepted": False}
    assert verification_fate([ok, ok]) == "accepted"
    assert verification_fate([ok, no]) == "verifier_rejected"
    assert verification_fate([ok, {"status": "request_failed", "accepted": False}]) == "retry"


# --- candidates and augment on the runner (fake engine) ---------------------------------------------

def _cand_cfg(tmp_path: Path) -> CandidatesConfig:
    write_jsonl(tmp_path / "problems.jsonl", [{"id": p.id, "problem": p.problem} for p in _problems(3)])
    return CandidatesConfig(problems=str(tmp_path / "problems.jsonl"), out=str(tmp_path / "cand"),
                            generators=[EndpointConfig(model="g0"), EndpointConfig(model="g1")], k=2, rounds=2,
                            critic="verifier", verifier=EndpointConfig(model="v"), critique=CriticConfig(n=1),
                            batch_size=1, progress=False)


def test_candidates_on_the_runner_killed_half_way(tmp_path, monkeypatch):
    cfg = _cand_cfg(tmp_path)
    out = Path(cfg.out)
    files = [out / "candidates.jsonl", out / "skipped.jsonl"]
    before = _kill_command("data_pipeline.candidates", cfg, 0.1, files, 8, tmp_path)
    n_before = sum(len(t.splitlines()) for t in before.values())
    monkeypatch.setattr(candidates, "OpenAIEngine", lambda ep: FakeEngine(ep.model))
    s = candidates.run(cfg)
    assert s["resumed_done"] == n_before and s["missing"] == 0
    for p, text in before.items():
        assert p.read_text().startswith(text)
    rows = read_jsonl(files[0])
    skipped = {r["id"]: r for r in read_jsonl(files[1])}
    ids = [r["id"] for r in rows]
    assert n_before < len(ids) + len(skipped), "the job finished before it was killed; nothing to resume"
    assert len(ids) == len(set(ids)) and not set(ids) & set(skipped)  # each version once
    assert set(s["skipped_by_reason"]) <= {"accepted_by_critic"} and s["by_round"]["0"] == 3 * 2 * 2
    by_id = {r["id"]: r for r in rows}
    for p in _problems(3):  # every chain complete: each version revised or stopped, up to round 2
        for g in range(2):
            for k in range(2):
                assert version_id(p.id, k, 0, generator=g) in by_id
                for rnd in (1, 2):
                    vid, parent = version_id(p.id, k, rnd, generator=g), version_id(p.id, k, rnd - 1, generator=g)
                    assert ((vid in by_id) != (vid in skipped)) if parent in by_id else vid not in skipped
                    if vid in by_id:
                        c = by_id[vid]["meta"]["candidate"]
                        assert c["parent_id"] == parent and c["critique"]["verdict"] == "invalid"
                        assert by_id[vid]["generator"] == f"g{g}" and c["critic"] == "verifier"
    assert read_jsonl(files[0])[0]["meta"]["candidate"]["finish_reason"] == "stop"
    s3 = candidates.run(cfg)
    assert s3["this_run"] == {} and s3["candidates_total"] == len(ids)


def test_candidates_skips_empty_and_retries_failed(tmp_path, monkeypatch):
    cfg = _cand_cfg(tmp_path)
    cfg.rounds, cfg.generators = 0, cfg.generators[:1]
    monkeypatch.setattr(candidates, "OpenAIEngine", lambda ep: FakeEngine(ep.model, empty={"p0-g0-s1-r0"},
                                                                          fail={"p2-g0-s0-r0"}))
    s = candidates.run(cfg)
    assert s["this_run"] == {"truncated": 0, "written_round_0": 4, "empty_proof": 1, "request_failed": 1}
    assert s["missing"] == 1 and s["skipped_by_reason"] == {"empty_proof": 1}
    [skip] = read_jsonl(Path(cfg.out) / "skipped.jsonl")
    assert (skip["id"], skip["reason"], skip["parent_id"]) == ("p0-g0-s1-r0", "empty_proof", None)
    monkeypatch.setattr(candidates, "OpenAIEngine", lambda ep: FakeEngine(ep.model))
    s = candidates.run(cfg)
    assert s["this_run"] == {"truncated": 0, "written_round_0": 1} and s["missing"] == 0


def _aug_cfg(tmp_path: Path) -> tuple[AugmentConfig, int]:
    trajs = generate_synthetic(10, seed=6, valid_fraction=0.2, proofs_per_problem=2)
    write_jsonl(tmp_path / "ann.jsonl", [t.to_dict() for t in trajs])
    n = len(augment.candidates(trajs)[0])
    return AugmentConfig(input=str(tmp_path / "ann.jsonl"), out=str(tmp_path / "aug"),
                         generator=EndpointConfig(model="gen"), verifiers=[EndpointConfig(model="v")],
                         verify=JudgeConfig(n=1), batch_size=1, progress=False), n


def test_augment_on_the_runner_killed_half_way(tmp_path, monkeypatch):
    cfg, n_cands = _aug_cfg(tmp_path)
    out = Path(cfg.out)
    files = [out / "positives.jsonl", out / "rejected.jsonl"]
    before = _kill_command("data_pipeline.augment", cfg, 0.2, files, 2, tmp_path)
    n_before = sum(len(t.splitlines()) for t in before.values())
    assert n_before < n_cands, "the job finished before it was killed; nothing to resume"
    monkeypatch.setattr(augment, "OpenAIEngine", lambda ep: FakeEngine(ep.model))
    s = augment.run(cfg)
    assert s["resumed_done"] == n_before and s["positives_total"] + s["rejected_total"] == n_cands
    for p, text in before.items():
        assert p.read_text().startswith(text)
    pos, rej = read_jsonl(files[0]), read_jsonl(files[1])
    keys = [(r["meta"]["augmentation"]["parent_id"], r["meta"]["augmentation"]["attempt"]) for r in pos] + \
           [(r["parent_id"], r["attempt"]) for r in rej]
    assert len(keys) == len(set(keys)) == n_cands  # every (parent, attempt) exactly once
    assert pos and rej and {r["reason"] for r in rej} == {"verifier_rejected"}
    for p in pos:
        assert p["id"] == p["meta"]["augmentation"]["parent_id"] + "-repair0" and p["generator"] == "gen"
        assert p["proof_steps"][1] == "So the answer is 42." and p["annotation"]["first_fatal_error_step"] == -1
    summary = json.loads((out / "augment_summary.json").read_text())
    assert summary["resumed_done"] == n_before
    s2 = augment.run(cfg)
    assert s2["resumed_done"] == n_cands and s2["this_run"] == {}


def test_augment_failed_requests_are_retried(tmp_path, monkeypatch):
    cfg, n_cands = _aug_cfg(tmp_path)
    cfg.batch_size = 4
    parent = augment.candidates(generate_synthetic(10, seed=6, valid_fraction=0.2, proofs_per_problem=2))[0][0]
    monkeypatch.setattr(augment, "OpenAIEngine", lambda ep: FakeEngine(ep.model, fail={f"repair:{parent.id}:0"}))
    s = augment.run(cfg)
    assert s["this_run"]["generation_request_failed"] == 1
    assert s["positives_total"] + s["rejected_total"] == n_cands - 1
    monkeypatch.setattr(augment, "OpenAIEngine", lambda ep: FakeEngine(ep.model))
    s = augment.run(cfg)
    assert s["resumed_done"] == n_cands - 1 and sum(s["this_run"].values()) == 1
