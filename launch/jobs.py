"""Submitit / SLURM job building for GRPO sweeps (``python training/grpo.py -m hydra/launcher=slurm ...``).

A submitit job runs its configuration through ``accelerate launch --config_file launch.accelerate_config``
(:func:`build_job_command`), never as one bare process, and a requeued job resumes (:func:`launch_job`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from training.config import GRPORunConfig, LaunchSettings

REPO = Path(__file__).resolve().parents[1]

SUBMITIT_LAUNCHERS = ("hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
                      "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher")


def _accelerate_exe() -> list[str]:
    exe = Path(sys.executable).parent / "accelerate"  # the venv's `accelerate` script
    if exe.exists():
        return [str(exe)]
    found = shutil.which("accelerate")
    if not found:
        raise FileNotFoundError("`accelerate` is not installed next to this Python nor on PATH")
    return [found]


def build_job_command(launch: LaunchSettings, overrides: list[str], launcher: dict[str, Any],
                      env: dict[str, str] | None = None, node_rank: int = 0,
                      hostnames: list[str] | None = None) -> list[str]:
    """The command a submitit job runs: ``accelerate launch --config_file F [...] training/grpo.py OVERRIDES``.

    ``launcher`` is the job's ``hydra.launcher`` config: ``gpus_per_node`` x ``nodes`` processes (a GPU job),
    else the accelerate file's ``num_processes`` (``launch.num_processes`` wins over both). Several nodes:
    ``--num_machines``, this node's ``--machine_rank`` and the first host as ``--main_process_ip``.

    >>> build_job_command(LaunchSettings("launch/accelerate/zero3.yaml", main_process_port=29600), ["experiment=base"],
    ...                   {"gpus_per_node": 8, "nodes": 1})[1:]  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
    ['launch', '--config_file', '.../launch/accelerate/zero3.yaml', '--num_processes', '8',
     '--main_process_port', '29600', '.../training/grpo.py', 'experiment=base']
    """
    env = os.environ if env is None else env
    cfg_file = Path(launch.accelerate_config)
    if not cfg_file.is_absolute() and not cfg_file.exists():
        cfg_file = REPO / cfg_file
    if not cfg_file.exists():
        raise FileNotFoundError(f"launch.accelerate_config={launch.accelerate_config}: no such accelerate config")
    nodes = int(launcher.get("nodes") or 1)
    gpus = int(launcher.get("gpus_per_node") or 0)
    n = launch.num_processes or (gpus * nodes if gpus else None)
    port = launch.main_process_port
    if port is None:
        job = env.get("SLURM_JOB_ID", "")
        port = 20000 + int(job) % 20000 if job.isdigit() else 29500
    cmd = [*_accelerate_exe(), "launch", "--config_file", str(cfg_file.resolve())]
    if n:
        cmd += ["--num_processes", str(n)]
    if nodes > 1:
        cmd += ["--num_machines", str(nodes), "--machine_rank", str(node_rank),
                "--main_process_ip", (hostnames or ["127.0.0.1"])[0]]
    cmd += ["--main_process_port", str(port), str(REPO / "training" / "grpo.py"), *overrides]
    return cmd


def submitit_launcher() -> dict[str, Any] | None:
    """The job's ``hydra.launcher`` config when this process is a submitit job, else None."""
    try:

        hc = HydraConfig.get()
    except Exception:
        return None
    if hc.launcher.get("_target_") not in SUBMITIT_LAUNCHERS:
        return None
    return OmegaConf.to_container(hc.launcher, resolve=True)


def launch_job(cfg: GRPORunConfig, launcher: dict[str, Any]) -> None:
    """Run this submitit job's configuration through ``accelerate launch``; a failure fails the job."""
    rank, hosts = 0, None
    if int(launcher.get("nodes") or 1) > 1:
        import submitit  # optional (the [gpu] extra): only multi-node jobs ask it

        job_env = submitit.JobEnvironment()
        rank, hosts = job_env.node, list(job_env.hostnames)
    overrides = list(cfg.overrides)
    if not any(o.lstrip("+~").startswith("resume=") for o in overrides):
        overrides.append("resume=true")  # a requeued job (timeout, preemption) continues from its last checkpoint
    cmd = build_job_command(cfg.launch, overrides, launcher, node_rank=rank, hostnames=hosts)
    print("submitit job: " + " ".join(cmd), flush=True)
    code = subprocess.run(cmd, cwd=os.getcwd()).returncode
    if code != 0:
        raise RuntimeError(f"accelerate launch exited with code {code}: {' '.join(cmd)}")
