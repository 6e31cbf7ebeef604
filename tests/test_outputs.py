"""One writer per output (issue 26.1): a second process on a locked output is refused, the file unchanged.

Real processes throughout: the holder is either a real command (``python -m eval.judge`` /
``eval.verifierbench``) blocked on a server that accepts connections and never answers, or a
process holding ``verifier.outputs.lock_output``; the second is the real command line.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import API_KEY
from verifier.errors import EXIT_USER_ERROR

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")


@pytest.fixture(scope="module")
def blackhole():
    """A TCP server that accepts connections and never answers: a request to it hangs (a busy holder)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    s.close()


@pytest.fixture(scope="module")
def trajs(tmp_path_factory) -> Path:
    from data_pipeline.synthetic import generate_synthetic
    from verifier.io import write_jsonl

    p = tmp_path_factory.mktemp("lock_inputs") / "trajs.jsonl"
    write_jsonl(p, generate_synthetic(3, seed=5, min_steps=2, max_steps=2))
    return p


def _holder(path: Path, folder: bool = False) -> subprocess.Popen:
    """A process that takes the lock of ``path`` and sleeps; returns once it holds it."""
    code = ("import sys, time; from verifier.outputs import lock_output\n"
            f"with lock_output({str(path)!r}, folder={folder}):\n    print('locked', flush=True); time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code], env=_env(), stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def _wait_for_holder(path: Path, proc: subprocess.Popen, timeout: float = 180) -> None:
    from verifier.outputs import read_holder

    deadline = time.monotonic() + timeout
    while (read_holder(path) or {}).get("pid") != proc.pid:
        assert proc.poll() is None, "the holder exited"
        assert time.monotonic() < deadline, "the holder never took the lock"
        time.sleep(0.2)


def _snapshot(root: Path) -> dict[str, bytes]:
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p): p.read_bytes() for p in files}


def _refused(args: list[str], output: Path, holder_pid: int, cwd: Path) -> str:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300,
                       check=False)
    err = p.stdout + p.stderr
    assert p.returncode == EXIT_USER_ERROR, err[-2000:]  # a held lock is a user error: one message, exit 2
    assert "Traceback" not in err, err[-2000:]
    assert "is in use by" in err and str(output) in err and f"pid {holder_pid} on host {socket.gethostname()}" in err
    assert "started 20" in err, err[-2000:]
    return f"{time.monotonic() - t0:.1f}s"


def test_lock_in_one_process_is_reentrant_and_released(tmp_path):
    from verifier.outputs import _held, lock_output, read_holder

    out = tmp_path / "j.jsonl"
    with lock_output(out):
        with lock_output(out):
            pass
        assert read_holder(out)["pid"] == os.getpid() and len(_held) == 1
    assert not _held
    h = _holder(out)  # released: another process can take it now
    h.kill()
    h.wait()


def test_a_forked_child_does_not_keep_the_lock(tmp_path):
    """A child forked by the holder (vLLM workers are) outliving it does not block the next run."""
    out = tmp_path / "j.jsonl"
    code = ("import os, sys, time; from verifier.outputs import acquire\n"
            f"acquire({str(out)!r})\n"
            "if os.fork() == 0:\n    os.write(1, b'child\\n'); time.sleep(600)\n"  # the fork hooks have run
            "os.write(1, b'locked\\n'); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code], env=_env(), stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert {parent.stdout.readline().strip(), parent.stdout.readline().strip()} == {"locked", "child"}
        os.kill(parent.pid, signal.SIGKILL)  # the holder dies, its forked child lives on
        parent.wait()
        h = _holder(out)  # the next writer gets the lock
        h.kill()
        h.wait()
    finally:
        os.killpg(parent.pid, signal.SIGKILL)


def test_runner_and_appender_refuse_a_file_another_process_holds(tmp_path, trajs):
    """The library path: ``judge`` would cut the torn last line and re-grade rows; refused, it changes nothing."""
    from verifier.io import JsonlAppender
    from verifier.judging import JudgeConfig
    from verifier.outputs import OutputLocked
    from verifier.runner import judge

    out = tmp_path / "judgments.jsonl"
    out.write_bytes(b'{"id": "a", "verdict": "valid"}\n{"id": "b", "verd')  # a torn last line
    before = out.read_bytes()
    h = _holder(out)
    try:
        from verifier.io import load_trajectories

        records = load_trajectories(trajs).records
        with pytest.raises(OutputLocked, match=f"{out}.*pid {h.pid}"):
            judge(records, None, JudgeConfig(n=1), out)  # refused before the engine is touched
        with pytest.raises(OutputLocked):
            JsonlAppender(out)
        assert out.read_bytes() == before
    finally:
        h.kill()
        h.wait()
    with JsonlAppender(out) as app:  # the holder is gone: the next writer proceeds (and repairs the torn line)
        app.write({"id": "c"})
    assert out.read_bytes() == b'{"id": "a", "verdict": "valid"}\n{"id": "c"}\n'


@pytest.mark.slow
def test_second_command_on_a_busy_output_is_refused(tmp_path, trajs, blackhole):
    """A real ``eval.judge`` and ``eval.verifierbench`` hang on their server mid-run (then frozen with SIGSTOP, so
    that every change is the second run's); the same command on the same output stops at once naming the holder,
    and not a byte under the output changes. The folder commands
    (ProverBench, selection, candidates, augment) are refused by a folder another process holds."""
    ep = [f"endpoint.base_url={blackhole}", "endpoint.model=m", "endpoint.max_retries=0", "endpoint.timeout_s=600"]
    out = tmp_path / "j.jsonl"
    out.write_text('{"id": "old", "verdict": "valid"}\n')
    judge_args = ["-m", "eval.judge", f"input={trajs}", f"output={out}", *ep, "judge.n=1", "progress=false"]
    first = subprocess.Popen([sys.executable, *judge_args], cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        _wait_for_holder(out, first)
        os.kill(first.pid, signal.SIGSTOP)  # frozen while holding the lock: any change is the second run's
        before = _snapshot(tmp_path)
        _refused(judge_args, out, first.pid, tmp_path)
        assert _snapshot(tmp_path) == before
    finally:
        first.kill()
        first.wait()

    vb = tmp_path / "vb"
    vb_args = ["-m", "eval.verifierbench", f"data={trajs}", f"out={vb}", *[a.replace("endpoint.", "verifier.")
                                                                         for a in ep], "judge.n=1", "progress=false"]
    first = subprocess.Popen([sys.executable, *vb_args], cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        _wait_for_holder(vb / "judgments.jsonl", first)  # past its start: config.json written, judging
        os.kill(first.pid, signal.SIGSTOP)
        before = _snapshot(vb)
        _refused(vb_args, vb, first.pid, tmp_path)
        assert _snapshot(vb) == before
    finally:
        first.kill()
        first.wait()

    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "q0", "problem": "Prove that 2 is even."}) + "\n")
    folder_cmds = {
        "pb": ["-m", "eval.proverbench", f"problems={problems}"],
        "sel": ["-m", "data_pipeline.selection", f"trajectories={trajs}"],
        "cand": ["-m", "data_pipeline.candidates", f"problems={problems}"],
        "aug": ["-m", "data_pipeline.augment", f"input={trajs}"],
    }
    for name, args in folder_cmds.items():
        d = tmp_path / name
        d.mkdir()
        (d / "rows.jsonl").write_text('{"id": "x"}\n{"id": "y", "tor')
        h = _holder(d, folder=True)
        try:
            before = _snapshot(d)
            _refused([*args, f"out={d}", "progress=false"], d, h.pid, tmp_path)
            assert _snapshot(d) == before, name
        finally:
            h.kill()
            h.wait()


@pytest.mark.vllm
@pytest.mark.slow
def test_a_holder_killed_by_sigkill_does_not_block_the_next_run(tmp_path, trajs, blackhole, vllm_server):
    """A real ``eval.judge`` killed with SIGKILL mid-run: the kernel drops its lock and the next run judges."""
    out = tmp_path / "j.jsonl"
    common = [f"input={trajs}", f"output={out}", "judge.n=1", "judge.max_tokens=8", "progress=false",
              f"endpoint.model={vllm_server.model_name}", f"endpoint.api_key={API_KEY}", "endpoint.max_retries=0"]
    first = subprocess.Popen([sys.executable, "-m", "eval.judge", *common, f"endpoint.base_url={blackhole}"],
                             cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_holder(out, first)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    p = subprocess.run([sys.executable, "-m", "eval.judge", *common, f"endpoint.base_url={vllm_server.base_url}"],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == sorted(
        json.loads(line)["id"] for line in trajs.read_text().splitlines())
