"""Scale-out over several servers of one model (``endpoint.base_url=[URL1, URL2]``) and the SDK's retries.

* Router logic (no network): least-loaded choice, per-server cap, FIFO waiting, take-out, revival.
* On the session vLLM server: a dead URL beside a live one (failover, per-server stats), all
  servers dead (a clear error), a 429 with ``Retry-After`` in front of the server (the OpenAI SDK's
  retry waits as told).
* Slow: two real vLLM servers under ``python -m eval.judge``; one is killed half-way through an
  8-pass run, and the completed output equals an uninterrupted run's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from conftest import API_KEY, REPO, free_port

from verifier.formats import load_processbench
from verifier.config import EndpointConfig
from verifier.engine import OpenAIEngine, Router, Server
from verifier.judging import JudgeConfig, synthetic_verdict_regex
from verifier.runner import judge_trajectories

REGEX = synthetic_verdict_regex(90)
GUIDED = {"structured_outputs": {"regex": REGEX}}


# ------------------------------------------------------------------------------------ config


def test_base_url_is_a_url_or_a_list():
    from eval.judge import JudgeAppConfig
    from verifier.config import compose

    assert EndpointConfig().urls == ["http://127.0.0.1:8000/v1"]
    cfg = compose("judge", JudgeAppConfig, ["input=x", "output=y",
                                            "endpoint.base_url=[http://h1:8000/v1,http://h2:8000/v1]"])
    assert cfg.endpoint.urls == ["http://h1:8000/v1", "http://h2:8000/v1"]
    assert [s.url for s in OpenAIEngine(cfg.endpoint).servers] == cfg.endpoint.urls
    with pytest.raises(ValueError, match="non-empty list"):
        EndpointConfig(base_url=[])
    with pytest.raises(ValueError, match="twice"):
        EndpointConfig(base_url=["http://h1/v1", "http://h1/v1"])
    with pytest.raises(ValueError, match="base_url"):
        EndpointConfig(base_url=["http://h1/v1", 3])


# ------------------------------------------------------------------------------- router logic


def test_router_least_loaded_cap_fifo_and_take_out():
    async def main():
        a, b = Server("A"), Server("B")
        r = Router([a, b], cap=2, revive_after_s=60)
        got = [await r.acquire() for _ in range(4)]  # least loaded first: A, B, A, B
        assert [s.url for s in got] == ["A", "B", "A", "B"] and r.in_flight == {"A": 2, "B": 2}
        first, second = asyncio.ensure_future(r.acquire()), asyncio.ensure_future(r.acquire())
        await asyncio.sleep(0)
        assert not first.done() and not second.done()  # every server is full: wait
        r.release(got[1])  # a slot on B: the first waiter gets it
        await asyncio.sleep(0)
        assert first.done() and first.result() is b and not second.done()
        r.take_out(a, "connection refused")  # A is dead: its slots do not count any more
        r.release(got[0])
        await asyncio.sleep(0)
        assert not second.done()  # A is out, B is full
        r.release(got[3])
        await asyncio.sleep(0)
        assert second.result() is b and a.stats["taken_out"] == 1
        assert await r.acquire(tried=["B"]) is None  # a request that failed on B has nowhere else to go
        waiting = asyncio.ensure_future(r.acquire(tried=["A"]))  # B is full: waits for B
        await asyncio.sleep(0)
        r.take_out(b, "connection reset")  # ... and B dies: nothing is left for it
        await asyncio.sleep(0)
        assert waiting.result() is None and r.live() == []

    asyncio.run(main())


def test_router_revives_a_server_and_cancelled_waiters_free_their_slot():
    async def main():
        a = Server("A")
        r = Router([a], cap=1, revive_after_s=0.05)
        r.take_out(a, "refused")
        assert await r.acquire() is None
        await asyncio.sleep(0.06)
        s = await r.acquire()  # tried again after revive_after_s
        assert s is a
        r.mark_ok(a)
        assert a.dead_since is None
        w = asyncio.ensure_future(r.acquire())
        await asyncio.sleep(0)
        w.cancel()
        r.release(a)
        await asyncio.sleep(0)
        assert r.in_flight == {"A": 0}  # the cancelled waiter holds no slot
        assert await r.acquire() is a

    asyncio.run(main())


# ------------------------------------------------------------------ on the session vLLM server


@pytest.fixture(scope="module")
def trajs(shared_data):
    return load_processbench(shared_data / "processbench" / "gsm8k.json")[:6]


def _rows(js):
    out = []
    for j in js:
        row = j.to_row()
        for p in row["passes"]:
            p.pop("completion_tokens")
        out.append(row)
    return out


@pytest.mark.vllm
def test_dead_server_beside_a_live_one_is_taken_out_and_nothing_is_lost(endpoint, trajs):
    jcfg = JudgeConfig(n=4, max_tokens=64, run_seed=5)
    single = OpenAIEngine(dataclasses.replace(endpoint, extra_body=GUIDED))
    ref = judge_trajectories(trajs, single, jcfg)
    dead_url = f"http://127.0.0.1:{free_port()}/v1"
    pair = OpenAIEngine(dataclasses.replace(endpoint, base_url=[dead_url, endpoint.base_url], extra_body=GUIDED,
                                            max_retries=1, max_concurrency=2))
    js = judge_trajectories(trajs, pair, jcfg)
    assert all(j.complete for j in js) and _rows(js) == _rows(ref)
    dead, live = pair.stats["servers"][dead_url], pair.stats["servers"][endpoint.base_url]
    assert dead["taken_out"] == 1 and dead["failures"] >= 1 and dead["retries"] >= 1  # the SDK retried it first
    assert pair.stats["failovers"] == dead["failures"] and pair.stats["failures"] == 0
    assert live["requests"] == pair.stats["requests"] == single.stats["requests"]  # each request served once
    assert pair.servers[0].dead_since is not None


@pytest.mark.vllm
def test_all_servers_dead_is_a_clear_error(trajs):
    urls = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    engine = OpenAIEngine(EndpointConfig(base_url=urls, api_key="x", model="m", max_retries=0, timeout_s=5))
    [j] = judge_trajectories(trajs[:1], engine, JudgeConfig(n=2))
    assert j.status == "request_failed" and not j.complete
    assert "all 2 servers of endpoint 'm' are down (after 0 retries each)" in j.passes[0].detail
    assert all(u in j.passes[0].detail for u in urls)
    assert engine.stats["failures"] == 1 and all(s["taken_out"] == 1 for s in engine.stats["servers"].values())


class _RateLimitProxy(http.server.ThreadingHTTPServer):
    """A reverse proxy in front of the vLLM server that answers the first ``n_limited`` POSTs with
    429 and ``Retry-After`` (what a rate-limited provider or a gateway sends), then forwards."""

    def __init__(self, upstream: str, n_limited: int, retry_after_s: float):
        self.upstream, self.n_limited, self.retry_after_s, self.posts = upstream, n_limited, retry_after_s, []
        super().__init__(("127.0.0.1", 0), _ProxyHandler)


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: _RateLimitProxy

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # http.server's method name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.posts.append(time.monotonic())
        if len(self.server.posts) <= self.server.n_limited:
            payload = json.dumps({"error": {"message": "rate limited", "type": "rate_limit"}}).encode()
            self.send_response(429)
            self.send_header("Retry-After", str(self.server.retry_after_s))
        else:
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
            resp = requests.post(self.server.upstream + self.path.removeprefix("/v1"), data=body, headers=headers,
                                 timeout=120)
            payload = resp.content
            self.send_response(resp.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.mark.vllm
def test_sdk_retry_honours_retry_after(endpoint, trajs):
    """Retries are the OpenAI SDK's: a 429 with ``Retry-After: 2`` is retried after 2 s (not after our own backoff)."""
    proxy = _RateLimitProxy(endpoint.base_url, n_limited=1, retry_after_s=2)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{proxy.server_address[1]}/v1"
        engine = OpenAIEngine(dataclasses.replace(endpoint, base_url=url, extra_body=GUIDED, max_retries=2))
        [j] = judge_trajectories(trajs[:1], engine, JudgeConfig(n=2, max_tokens=64))
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert j.complete and all(p.ok for p in j.passes)
    assert len(proxy.posts) == 2 and proxy.posts[1] - proxy.posts[0] >= 1.9
    assert engine.stats["retries"] == 1 and engine.stats["requests"] == 1 and engine.stats["failovers"] == 0


# ------------------------------------------------------ two real servers, one killed mid-run


N_PROOFS = 16


@pytest.fixture(scope="module")
def two_servers(tiny_model, tmp_path_factory):
    """Two vLLM servers of the tiny model (one core each), started side by side."""
    from verifier.serve import ServeConfig, VLLMServer

    logs = tmp_path_factory.mktemp("vllm-pair")
    servers = [VLLMServer(ServeConfig(model=str(tiny_model), port=free_port(), api_key=API_KEY, omp_num_threads=1,
                                      kv_cache_memory_bytes="64M", max_num_seqs=32, log_file=str(logs / f"s{i}.log")))
               for i in range(2)]
    try:
        for s in servers:
            s.start(wait=False)
        for s in servers:
            s.wait_healthy()
        yield servers
    finally:
        for s in servers:
            s.stop()


def _judge_args(servers, inp: Path, out: Path, *extra: str) -> list[str]:
    urls = ",".join(s.base_url for s in servers)
    return [f"input={inp}", f"output={out}", f"endpoint.base_url=[{urls}]", f"endpoint.api_key={API_KEY}",
            f"endpoint.model={servers[0].model_name}", "endpoint.max_retries=1", "judge.n=8", "judge.max_tokens=64",
            "judge.run_seed=3", "judge.policy=pessimistic", "judge.early_stop=false",
            f"+endpoint.extra_body.structured_outputs={{regex:'{REGEX}'}}", *extra]


@pytest.mark.slow
@pytest.mark.vllm
def test_server_killed_mid_run_loses_and_duplicates_nothing(two_servers, shared_data, tmp_path):
    """An 8-pass ``eval.judge`` run over two servers; one is SIGKILLed half-way. The run finishes on the
    other and its output equals an uninterrupted run's: every (record, pass) exactly once, with the
    same seed and the same sampled text (seeded sampling with guided decoding gives the same text on
    either server, which the uninterrupted run over both servers checks too)."""
    from eval.judge import JudgeAppConfig, run
    from verifier.config import compose
    from verifier.io import read_jsonl, write_jsonl

    inp = tmp_path / "proofs.jsonl"
    write_jsonl(inp, load_processbench(shared_data / "processbench" / "gsm8k.json")[:N_PROOFS])
    ref_out = tmp_path / "ref.jsonl"
    summary = run(compose("judge", JudgeAppConfig, _judge_args(two_servers, inp, ref_out, "cache=none", "progress=false")))
    assert summary["written"] == N_PROOFS and summary["failed"] == 0
    ref = {r["id"]: r for r in read_jsonl(ref_out)}
    assert {r["verdict"] for r in ref.values()} == {"valid", "invalid"}  # a mixed set, so the comparison can fail

    out = tmp_path / "out.jsonl"
    args = _judge_args(two_servers, inp, out, "endpoint.max_concurrency=2", "judge.max_concurrency=4")
    proc = subprocess.Popen([sys.executable, "-m", "eval.judge", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while (not out.exists() or out.read_text().count("\n") < 4) and proc.poll() is None:
            assert time.monotonic() < deadline, "the judge wrote nothing in 300 s"
            time.sleep(0.05)
        lines_at_kill = out.read_text().count("\n")
        two_servers[1].kill()  # SIGKILL, with requests in flight on it (2 of the 4 in flight are routed there)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert lines_at_kill < N_PROOFS, "killed half-way"
    assert proc.returncode == 0, stderr[-3000:]
    assert f"written={N_PROOFS}" in stdout and "failed=0" in stdout
    assert f"server {two_servers[1].base_url} taken out" in stderr and "1 of 2 live" in stderr
    rows = read_jsonl(out)
    assert sorted(r["id"] for r in rows) == sorted(ref), "every record exactly once"
    for r in rows:
        assert [p["index"] for p in r["passes"]] == list(range(8)), f"{r['id']}: every pass exactly once"
        want = ref[r["id"]]
        assert [p["seed"] for p in r["passes"]] == [p["seed"] for p in want["passes"]]
        assert [(p["text"], p["verdict"], p["first_error_step"]) for p in r["passes"]] == \
            [(p["text"], p["verdict"], p["first_error_step"]) for p in want["passes"]]
        assert (r["verdict"], r["first_error_step"], r["accept_fraction"]) == \
            (want["verdict"], want["first_error_step"], want["accept_fraction"])
    assert API_KEY not in stdout + stderr
