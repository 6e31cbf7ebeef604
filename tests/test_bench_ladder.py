"""bench/bench_ladder.py (`make bench-ladder`): options checked before work, and a run killed half-way resumes at
the stage it was in with the finished stages reused, to the same data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = ["n_prover_sft=64", "prover_sft_steps=20", "prover_save_every=10",
        "prover_ckpts=10,20", "sft_batch=4", "n_verifier_sft=64", "verifier_sft_steps=10",
        "n_pool_problems=8", "n_heldout_problems=4", "k=1", "rounds=1", "budget=4", "select_passes=2",
        "repairer_sft_steps=2", "until=augment"]


def _bench(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "bench" / "bench_ladder.py"), *args], cwd=REPO,
                          capture_output=True, text=True, **kw)


def test_bad_options_are_one_error_before_work(tmp_path):
    for bad, what in (("budgets=3", "unknown option"), ("until=nowhere", "until="), ("k=two", "expected int"),
                      ("repair_check=oracle", "repair_check"),
                      ("repairer_sft_steps=-1", "repairer_sft_steps")):
        r = _bench(f"out={tmp_path / 'x'}", bad, timeout=60)
        assert r.returncode == 2 and what in r.stderr, (bad, r.stderr[-500:])
        assert "Traceback" not in r.stderr and r.stderr.strip().splitlines()[-1].startswith("bench-ladder: error: ")
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_killed_half_way_resumes_to_the_same_data(tmp_path):
    out = tmp_path / "ladder"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, str(REPO / "bench" / "bench_ladder.py"), f"out={out}", *TINY], cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + 600
    while not (out / "candidates" / "problems.jsonl").is_file():  # the candidates stage has started: kill it there
        assert p.poll() is None and time.monotonic() < deadline, "the bench ended before its candidates stage"
        time.sleep(1)
    time.sleep(5)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert (out / "provers" / "bench_done.json").is_file() and not (out / "candidates" / "bench_done.json").is_file()
    weights = (out / "provers" / "sft" / "final" / "model.safetensors").stat().st_mtime_ns
    r = _bench(f"out={out}", *TINY, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "provers: resumed" in r.stdout and "verifier: resumed" in r.stdout
    assert "candidates: done" in r.stdout and "selection: done" in r.stdout
    assert "repairer: done" in r.stdout and "augment: done" in r.stdout  # the repair stage on the annotated queue
    assert (out / "repairer" / "sft" / "final").is_dir() and (out / "augment" / "augment_summary.json").is_file()
    assert (out / "provers" / "sft" / "final" / "model.safetensors").stat().st_mtime_ns == weights  # not retrained
    ids = [json.loads(x)["id"] for x in (out / "candidates" / "candidates.jsonl").read_text().splitlines()]
    assert ids and len(ids) == len(set(ids))  # each version once, whatever the kill cut
    # a second run changes nothing: every stage is resumed
    r2 = _bench(f"out={out}", *TINY, timeout=300, env=env)
    assert r2.returncode == 0 and r2.stdout.count(": resumed") == 6, r2.stdout[-2000:]
    # other settings are an error naming them, never a silent mix
    r3 = _bench(f"out={out}", *TINY[:-1], "budget=5", "until=selection", timeout=300, env=env)
    assert r3.returncode != 0 and "budget" in r3.stderr
