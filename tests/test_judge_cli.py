"""``python -m eval.judge``: output format, resume after a killed judge, a killed server, keys never written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import API_KEY, REPO

from verifier.formats import load_processbench
from eval.judge import JudgeAppConfig, run
from verifier.config import compose
from verifier.io import read_jsonl, write_jsonl
from verifier.judging import synthetic_verdict_regex
from verifier.records import ProofTrajectory

pytestmark = pytest.mark.vllm

N_PROOFS = 14
REGEX = synthetic_verdict_regex(90)


@pytest.fixture(scope="module")
def input_jsonl(shared_data, tmp_path_factory) -> Path:
    trajs = load_processbench(shared_data / "processbench" / "gsm8k.json")[:N_PROOFS - 1]
    huge = ProofTrajectory(id="huge", problem_id="huge", problem="Prove it.",
                           proof_steps=tuple("lemma " * 1500 for _ in range(6)))  # > max_model_len 8192
    path = tmp_path_factory.mktemp("judge_in") / "proofs.jsonl"
    write_jsonl(path, trajs[:5] + [huge] + trajs[5:])
    return path


def overrides(vllm_server, inp: Path, out: Path, *extra: str) -> list[str]:
    return [f"input={inp}", f"output={out}", f"endpoint.base_url={vllm_server.base_url}",
            f"endpoint.api_key={API_KEY}", f"endpoint.model={vllm_server.model_name}",
            "judge.n=8", "judge.policy=pessimistic", "judge.early_stop=false",
            "judge.max_tokens=64", "judge.run_seed=3", "endpoint.max_retries=1",
            f"+endpoint.extra_body.structured_outputs={{regex:'{REGEX}'}}", *extra]


@pytest.fixture(scope="module")
def reference(vllm_server, input_jsonl, tmp_path_factory) -> dict[str, dict]:
    """An uninterrupted run (in-process, no cache) with the same seeds."""
    out = tmp_path_factory.mktemp("judge_ref") / "ref.jsonl"
    cfg = compose("judge", JudgeAppConfig, overrides(vllm_server, input_jsonl, out, "cache=none", "progress=false"))
    summary = run(cfg)
    assert summary["written"] == N_PROOFS and summary["failed"] == 0 and summary["too_long"] == 1
    rows = read_jsonl(out)
    assert len(rows) == N_PROOFS
    return {r["id"]: r for r in rows}


def decisions(row: dict) -> dict:
    row = json.loads(json.dumps(row))
    for p in row["passes"]:
        p.pop("completion_tokens")
    return row


def cmd(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "eval.judge", *args]


def wait_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = path.read_text().count("\n") if path.exists() else 0
        if lines >= n or proc.poll() is not None:
            return lines
        time.sleep(0.05)
    raise TimeoutError(f"{path} has fewer than {n} lines after {timeout}s")


def check_complete(out: Path, reference: dict[str, dict]) -> None:
    rows = read_jsonl(out)
    ids = [r["id"] for r in rows]
    assert sorted(ids) == sorted(reference), "every proof exactly once"
    for r in rows:
        idx = [p["index"] for p in r["passes"]]
        assert idx == list(range(8)), f"{r['id']}: each pass exactly once"
        assert decisions(r) == decisions(reference[r["id"]])


def test_output_format(reference):
    row = next(r for r in reference.values() if r["id"] != "huge")
    assert {"id", "verdict", "first_error_step", "accept_fraction", "passes"} <= set(row)
    assert row["verdict"] in ("valid", "invalid") and 0.0 <= row["accept_fraction"] <= 1.0
    assert {"index", "verdict", "first_error_step", "parse_status", "text"} <= set(row["passes"][0])
    assert {r["verdict"] for r in reference.values()} == {"valid", "invalid"}
    huge = reference["huge"]
    assert huge["status"] == "too_long" and huge["passes"][0]["parse_status"] == "too_long"


def test_killed_judge_resumes_without_duplicates(vllm_server, input_jsonl, reference, tmp_path):
    out = tmp_path / "out.jsonl"
    args = overrides(vllm_server, input_jsonl, out, "endpoint.max_concurrency=1", "judge.max_concurrency=1")
    proc = subprocess.Popen(cmd(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        got = wait_lines(out, 3, proc)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert 0 < got < N_PROOFS, "killed half-way"
    with open(out, "a") as f:  # a torn line, as if killed in the middle of a write
        f.write('{"id": "gsm8k-9", "verdi')
    second = subprocess.run(cmd(args), cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0, second.stderr[-2000:]
    summary = second.stdout.strip().splitlines()[-1]
    done_before = int(summary.split("already_done=")[1].split()[0])
    assert done_before >= got and f"written={N_PROOFS - done_before}" in summary
    check_complete(out, reference)
    third = subprocess.run(cmd(args), cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert third.returncode == 0 and "written=0" in third.stdout and f"already_done={N_PROOFS}" in third.stdout
    check_complete(out, reference)
    assert "judge n=8" in second.stderr  # the progress bar
    for path in (out, Path(str(out) + ".cache.sqlite")):
        assert API_KEY.encode() not in path.read_bytes()
    for text in (second.stdout, second.stderr, third.stdout, third.stderr):
        assert API_KEY not in text
    assert not list(tmp_path.glob("**/.hydra")) and not (REPO / ".hydra").exists()


@pytest.mark.slow
def test_server_killed_mid_run_then_restarted(vllm_server, input_jsonl, reference, tmp_path):
    """Kill the (session) server under a running judge, restart it on the same port, re-run."""
    out = tmp_path / "out.jsonl"
    args = overrides(vllm_server, input_jsonl, out, "endpoint.max_concurrency=1", "judge.max_concurrency=1")
    proc = subprocess.Popen(cmd(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        got = wait_lines(out, 3, proc)
        vllm_server.kill()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        vllm_server.start()  # the session server must be healthy for the tests after this one
    assert proc.returncode == 1, stderr[-2000:]
    assert "re-run the same command" in stderr and "not judged" in stderr
    first = read_jsonl(out)
    assert got <= len(first) < N_PROOFS
    assert len({r["id"] for r in first}) == len(first)
    second = subprocess.run(cmd(args), cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"already_done={len(first)}" in second.stdout
    check_complete(out, reference)
    for text in (stdout, stderr, second.stdout, second.stderr):
        assert API_KEY not in text


def test_wrong_api_key_is_refused_and_nothing_written(vllm_server, input_jsonl, tmp_path):
    out = tmp_path / "out.jsonl"
    args = [a for a in overrides(vllm_server, input_jsonl, out, "limit=2", "judge.n=2")
            if not a.startswith("endpoint.api_key")]
    env = {k: v for k, v in os.environ.items() if k not in ("VERIFIER_API_KEY", "OPENAI_API_KEY")}
    res = subprocess.run(cmd(args + ["endpoint.api_key=wrong-key"]), cwd=REPO, capture_output=True, text=True,
                         timeout=120, env=env, check=False)
    assert res.returncode == 1 and "401" in res.stderr
    assert "wrong-key" not in res.stdout + res.stderr
    assert read_jsonl(out) == []
    # the key may come from the environment instead of the command line
    res = subprocess.run(cmd(args), cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**env, "VERIFIER_API_KEY": API_KEY}, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert len(read_jsonl(out)) == 2


def test_processbench_opc_and_bad_jsonl_inputs(vllm_server, shared_data, tmp_path):
    for inp in (shared_data / "processbench" / "gsm8k.json", shared_data / "opc_test" / "test.parquet"):
        out = tmp_path / f"{inp.stem}.jsonl"
        cfg = compose("judge", JudgeAppConfig, overrides(vllm_server, inp, out, "limit=2", "judge.n=2",
                                                         "progress=false"))
        assert run(cfg)["written"] == 2
        rows = read_jsonl(out)
        assert len(rows) == 2 and all(r["status"] in ("ok", "too_long") for r in rows)
    bad = tmp_path / "bad.jsonl"
    good = load_processbench(shared_data / "processbench" / "gsm8k.json")[0].to_dict()
    bad.write_text(json.dumps(good) + "\n" + json.dumps({"id": "b1", "problem": "p"}) + "\n")
    cfg = compose("judge", JudgeAppConfig, overrides(vllm_server, bad, tmp_path / "o.jsonl", "judge.n=1",
                                                     "on_error=skip", "progress=false"))
    summary = run(cfg)
    assert summary["skipped_input"] == 1 and summary["written"] == 1
    with pytest.raises(Exception, match="'b1'"):
        run(compose("judge", JudgeAppConfig, overrides(vllm_server, bad, tmp_path / "o2.jsonl", "progress=false")))
