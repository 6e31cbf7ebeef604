"""launch/gpu_check.py on CPU: its argument handling and preflight (one line, exit 2), the carried-wheel install of
launch/gpu_check.sh, and one whole run (--allow-cpu --dtype fp32 --steps 1) whose last line has every key."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "launch" / "gpu_check.py"
SHELL = REPO / "launch" / "gpu_check.sh"
KEYS = ("device", "bf16", "sft_steps", "sft_loss_first", "sft_loss_last", "grpo_steps", "grpo_s_per_step",
        "heldout_parsed", "seconds")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", WANDB_MODE="disabled",
               **extra)
    return env


def _run(args: list[str], timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, env=_env(**env), capture_output=True,
                          text=True, timeout=timeout)


def _error_line(p: subprocess.CompletedProcess) -> str:
    """The one ``gpu_check:`` line of a refused run: the last line of stderr, and no other like it."""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    ours = [ln for ln in lines if ln.startswith("gpu_check: ")]
    assert len(ours) == 1 and lines[-1] == ours[0], p.stderr[-2000:]
    return ours[0]


@pytest.mark.parametrize("args, says", [
    (["--steps", "0"], "--steps: must be >= 1, got 0"),
    (["--steps", "x"], "--steps: not an integer: 'x'"),
    (["--dtype", "fp16"], "--dtype: invalid choice: 'fp16'"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--allow-cpu", "extra"], "unrecognized arguments: extra"),
])
def test_a_bad_option_is_one_line_and_exit_2(args, says):
    p = _run(args, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""  # refused before any import or work
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("gpu_check: ") and says in p.stderr, p.stderr


def test_an_out_folder_in_use_is_refused(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    p = _run(["--out", str(tmp_path), "--allow-cpu"], timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "is not an empty folder" in p.stderr


def test_the_shell_wrapper_passes_the_exit_code_through():
    p = subprocess.run(["bash", str(SHELL), "--dtype", "int8"], cwd=REPO, env=_env(PYTHON=sys.executable),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--dtype: invalid choice" in p.stderr


def test_no_cuda_without_allow_cpu_is_one_line_naming_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    p = _run(["--out", str(tmp_path / "out")])
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    line = _error_line(p)
    assert "no CUDA device" in line and "--allow-cpu" in line
    assert re.match(r"preflight: torch=\S+ transformers=\S+ peft=\S+ accelerate=\S+ trl=\S+ datasets=\S+$",
                    p.stdout.splitlines()[0])
    assert not (tmp_path / "out").exists()  # nothing was written


def test_a_missing_package_is_one_line_naming_the_wheel_to_carry(tmp_path):
    """``datasets`` shadowed by a module that fails like an absent one: one line names it, the wheel to carry and
    the wrapper that installs it."""
    shim = tmp_path / "shim" / "datasets"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'datasets\'", name="datasets")\n')
    p = _run(["--allow-cpu", "--out", str(tmp_path / "out")], PYTHONPATH=str(shim.parent))
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    line = _error_line(p)
    assert line.startswith("gpu_check: missing package(s): datasets (import datasets: No module named 'datasets')")
    assert "carry the wheels of datasets under wheels/" in line and "launch/gpu_check.sh" in line
    assert "datasets=MISSING" in p.stdout.splitlines()[0]


def _wheel(folder: Path, name: str = "gpucheckprobe", version: str = "0.1") -> Path:
    """A minimal pure-Python wheel, built here (nothing downloaded)."""
    files = {f"{name}/__init__.py": b"OK = True\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  b"Tag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
              f"{len(data)}" for path, data in files.items()]
    files[f"{name}-{version}.dist-info/RECORD"] = ("\n".join([*record, f"{name}-{version}.dist-info/RECORD,,"])
                                                   + "\n").encode()
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, data in files.items():
            z.writestr(p, data)
    return path


@pytest.mark.parametrize("relative", [False, True])
def test_the_shell_wrapper_installs_carried_wheels_without_an_index(tmp_path, relative):
    """The carried wheel is installed (pip, no index) and importable by the check's interpreter: a stand-in
    PYTHON runs pip as it is and, instead of the check, imports the wheel's module."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nif [ "$1" = -m ]; then exec {sys.executable} "$@"; fi\n'
                      f'exec {sys.executable} -c "import gpucheckprobe; print(\'probe\', gpucheckprobe.OK, \'$2\')"\n')
    python.chmod(0o755)
    where = os.path.relpath(wheels, REPO) if relative else str(wheels)
    p = subprocess.run(["bash", str(SHELL), "--steps", "3"], cwd=REPO,
                       env=_env(PYTHON=str(python), GPU_CHECK_WHEELS=where, PIP_NO_INDEX="1"),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout == "probe True --steps\n", p.stdout + p.stderr
    assert (wheels / "site" / "gpucheckprobe" / "__init__.py").is_file()


def test_a_cpu_run_completes_and_prints_the_last_line_with_every_key(tmp_path):
    out = tmp_path / "check"
    p = _run(["--allow-cpu", "--dtype", "fp32", "--steps", "1", "--out", str(out)], timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    last = p.stdout.strip().splitlines()[-1]
    pairs = dict(kv.split("=", 1) for kv in last.split(" "))
    assert tuple(pairs) == KEYS, last
    assert pairs["device"] == "cpu" and pairs["bf16"] == "0"
    assert pairs["sft_steps"] == pairs["grpo_steps"] == "1"
    for key in ("sft_loss_first", "sft_loss_last", "grpo_s_per_step", "seconds"):
        assert float(pairs[key]) > 0, key
    assert 0.0 <= float(pairs["heldout_parsed"]) <= 1.0
    doc = json.loads((out / "gpu_check.json").read_text())
    assert doc["device"] == "cpu" and doc["dtype"] == "fp32" and len(doc["heldout"]) == 8
    assert set(doc["versions"]) == {"torch", "transformers", "peft", "accelerate", "trl", "datasets"}
    assert (out / "grpo" / "final" / "config.json").is_file() and (out / "sft" / "final" / "config.json").is_file()
