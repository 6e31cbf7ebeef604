"""Engine layer: the one interface through which every caller talks to a model.

Two implementations with the same sampling semantics (both take ``verifier.config.Sampling``; the
servers are a ``verifier.config.EndpointConfig``):

* ``OpenAIEngine`` - any OpenAI-compatible server (vLLM first) on the ``openai``
  async client: bounded concurrency, per-request timeout, the SDK's own retries (exponential
  backoff with jitter, ``Retry-After`` honoured) on connection errors, timeouts, 429 and 5xx,
  API key, ``n`` samples in one request (shared prefill), model or LoRA-adapter name selectable.
  Scale-out: ``base_url`` may be a list of servers of the same model; each request goes to the
  least-loaded live server, a server that stops answering is taken out and its requests are
  retried on the others (the same seeded request, so nothing is lost or sampled twice).
* ``VLLMOfflineEngine`` - ``vllm.LLM`` for single-node batch jobs (in ``verifier.offline``).

Reasoning models (sections 3.3, 5.1): a server started with ``--reasoning-parser`` returns the
answer as ``content`` and the thinking as ``reasoning_content`` (``reasoning`` in newer vLLM);
both are kept (``Completion.text`` / ``Completion.reasoning``) with the ``finish_reason`` of
every sample. Per-endpoint ``max_tokens`` (the thinking budget), ``reasoning_effort``
(gpt-oss) and ``chat_template_kwargs`` (e.g. ``{"enable_thinking": false}`` for Qwen3) are
sent with every request.

Seeds (section 4.4, reproducible passes): sample ``i`` of a request with seed ``s``
uses seed ``s + i`` (vLLM's rule for ``n > 1``), and pass ``k`` of trajectory ``t``
in run ``r`` has seed ``pass_seed(t, k, r) = base_seed(t, r) + k``. A request for
passes ``k..k+m-1`` is therefore ``n=m, seed=base+k``, whatever the wave shape.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import requests
from tqdm.auto import tqdm

from verifier.config import EndpointConfig, Sampling

log = logging.getLogger(__name__)

Messages = list[dict[str, str]]


def base_seed(key: str, run_seed: int = 0) -> int:
    """Per-trajectory base seed from (trajectory id, run seed); pass k uses base + k.

    >>> base_seed("p1-a", 0) == base_seed("p1-a", 0), base_seed("p1-a", 0) != base_seed("p1-a", 1)
    (True, True)
    """
    h = hashlib.sha256(f"{run_seed}:{key}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x3FFFFFFF  # leaves room for + pass index


def pass_seed(key: str, pass_index: int, run_seed: int = 0) -> int:
    """The seed of one verification pass (derived from trajectory id, pass index and run seed)."""
    return base_seed(key, run_seed) + pass_index


@dataclass
class GenerationRequest:
    """``n`` samples of one chat prompt; sample i is drawn with seed ``seed + i``."""

    messages: Messages
    n: int = 1
    seed: int | None = None
    key: str = ""  # caller's id (trajectory id, ...) for logs and errors
    model: str | None = None  # override the engine's model (e.g. a LoRA adapter name)


@dataclass
class Completion:
    """One sample: its answer text (and thinking), or an error status (``too_long``, ``request_failed``).

    ``reasoning`` is the server-separated thinking (``reasoning_content``); it is stored with the
    judgment but never parsed for a verdict. ``finish_reason == "length"`` means the sample hit
    its token budget (``verifier.parser.parse_completion`` makes it a ``truncated`` pass).
    """

    text: str = ""
    finish_reason: str | None = None
    error: str | None = None  # None when the request succeeded
    status: str = "ok"  # ok | too_long | request_failed
    completion_tokens: int = 0
    prompt_tokens: int = 0
    latency_s: float = 0.0
    reasoning: str = ""


def message_reasoning(message: Any) -> str:
    """The thinking a reasoning parser split off (``reasoning_content``, ``reasoning`` or ``thinking``), or "":
    of a vLLM response message, or of a message dict (TRL's completions parsed by the chat template).

    >>> from types import SimpleNamespace as NS
    >>> message_reasoning(NS(reasoning_content="hmm", content="x")), message_reasoning(NS(content="x"))
    ('hmm', '')
    >>> message_reasoning({"role": "assistant", "thinking": "hmm", "content": "x"})
    'hmm'
    """
    for name in ("reasoning_content", "reasoning", "thinking"):
        value = message.get(name) if isinstance(message, dict) else getattr(message, name, None)
        if value is None and not isinstance(message, dict):
            value = (getattr(message, "model_extra", None) or {}).get(name)
        if isinstance(value, str) and value:
            return value
    return ""


class Engine(Protocol):
    """What every caller uses: a batch of requests in, ``n`` completions per request out."""

    model: str

    def generate(self, requests: Sequence[GenerationRequest], sampling: Sampling,
                 progress: bool = False) -> list[list[Completion]]: ...

    async def agenerate(self, requests: Sequence[GenerationRequest], sampling: Sampling
                        ) -> list[list[Completion]]: ...


def served_models(base_url: str, api_key: str | None, timeout_s: float = 10.0) -> list[str]:
    """The model ids ``GET {base_url}/models`` lists (raises ``requests`` errors)."""

    r = requests.get(base_url.rstrip("/") + "/models", timeout=timeout_s,
                     headers={"Authorization": f"Bearer {api_key or 'EMPTY'}"})
    r.raise_for_status()
    return [m.get("id") for m in r.json().get("data", [])]


_TOO_LONG_MARKERS = ("maximum context length", "context length", "too long", "max_model_len",
                     "longer than the maximum", "exceeds the model")


@dataclass
class Server:
    """One server of an endpoint: its health (shared by every session of the engine) and its counts."""

    url: str
    dead_since: float | None = None  # monotonic time it was taken out; None while live
    last_error: str = ""
    stats: dict[str, Any] = field(default_factory=lambda: {"requests": 0, "failures": 0, "retries": 0,
                                                           "taken_out": 0})


_WAIT = object()  # no free slot on a usable server yet


class Router:
    """Least-loaded routing over the live servers of one endpoint, ``cap`` requests in flight per server.

    ``acquire(tried)`` returns the live server with the fewest requests in flight among those not
    in ``tried`` (waiting, first come first served, while they are all full), or ``None`` when no
    such server is left. ``take_out`` marks a server dead; it becomes usable again after
    ``revive_after_s`` (and live again on its next success). Pure asyncio, one event loop.
    """

    def __init__(self, servers: Sequence[Server], cap: int, revive_after_s: float = 30.0):
        self.servers = list(servers)
        self.cap = max(1, int(cap))
        self.revive_after_s = revive_after_s
        self.in_flight = {s.url: 0 for s in self.servers}  # this router's (session's) requests only
        self._waiters: collections.deque[tuple[frozenset[str], asyncio.Future]] = collections.deque()

    def usable(self, s: Server, now: float | None = None) -> bool:
        return s.dead_since is None or (now if now is not None else time.monotonic()) - s.dead_since >= self.revive_after_s

    def live(self) -> list[Server]:
        now = time.monotonic()
        return [s for s in self.servers if self.usable(s, now)]

    def _pick(self, tried: frozenset[str], now: float) -> Any:
        cands = [s for s in self.servers if s.url not in tried and self.usable(s, now)]
        if not cands:
            return None
        free = [s for s in cands if self.in_flight[s.url] < self.cap]
        if not free:
            return _WAIT
        return min(free, key=lambda s: (self.in_flight[s.url], s.stats["requests"]))

    async def acquire(self, tried: Sequence[str] = ()) -> Server | None:
        tried = frozenset(tried)
        if not self._waiters:  # nobody queued: take a slot now (else queue behind them, FIFO)
            got = self._pick(tried, time.monotonic())
            if got is not _WAIT:
                if got is not None:
                    self.in_flight[got.url] += 1
                return got
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((tried, fut))
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.result() is not None:
                self.release(fut.result())  # a slot was handed over just as we were cancelled
            raise

    def release(self, s: Server) -> None:
        self.in_flight[s.url] -= 1
        self._dispatch(full=False)

    def take_out(self, s: Server, error: str) -> None:
        if s.dead_since is None:
            s.stats["taken_out"] += 1
        s.dead_since, s.last_error = time.monotonic(), error
        self._dispatch(full=True)  # waiters whose every candidate is gone get None now

    def mark_ok(self, s: Server) -> None:
        s.dead_since = None

    def _dispatch(self, full: bool) -> None:
        now = time.monotonic()
        kept: collections.deque = collections.deque()
        while self._waiters:
            tried, fut = self._waiters.popleft()
            if fut.done():  # cancelled
                continue
            got = self._pick(tried, now)
            if got is _WAIT:
                kept.append((tried, fut))
                if not full and not any(self.in_flight[s.url] < self.cap and self.usable(s, now)
                                        for s in self.servers):
                    break  # no free slot anywhere: the rest keep waiting (next release or take-out)
                continue
            if got is not None:
                self.in_flight[got.url] += 1
            fut.set_result(got)
        kept.extend(self._waiters)
        self._waiters = kept


class _Pool:
    """One event loop's clients (one ``AsyncOpenAI`` per server) and router."""

    def __init__(self, router: Router, clients: dict[str, Any]):
        self.router, self.clients = router, clients


class OpenAIEngine:
    """Async client for one or several OpenAI-compatible servers; ``generate`` wraps ``agenerate``.

    Each request goes to the least-loaded live server (at most ``max_concurrency`` in flight per
    server). Transient errors are retried on the same server by the OpenAI SDK (``max_retries``,
    jittered exponential backoff, ``Retry-After``). When they persist, the request moves to another
    server not yet tried: after a connection error the server is also taken out (tried again after
    ``revive_after_s``); after a timeout, 429 or 5xx it stays in. A 400 (e.g. prompt too long) or
    other 4xx is not retried. The request is the same on every server (same ``seed``), so a judging
    pass is the same pass wherever it runs. When no server is left the samples come back as
    ``request_failed`` with an error naming every server and why it failed.

    ``stats``: ``requests`` (one per request, whatever servers it took), ``retries`` (the SDK's),
    ``failures`` (requests given up), ``failovers`` (moves to another server), ``too_long``, and
    ``servers[url]`` with each server's ``requests``, ``failures``, ``retries`` and ``taken_out``.
    """

    def __init__(self, cfg: EndpointConfig):
        self.cfg = cfg
        self.model = cfg.model
        self.servers = [Server(u) for u in cfg.urls]
        self.stats: dict[str, Any] = {"requests": 0, "retries": 0, "failures": 0, "too_long": 0, "failovers": 0,
                                      "servers": {s.url: s.stats for s in self.servers}}

    def _client(self, server: Server):
        # lazy: the OpenAI client takes most of a second to import; only a served run builds one
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        async def count_retry(request: Any) -> None:  # the SDK numbers its attempts in this header
            if request.headers.get("x-stainless-retry-count", "0") not in ("", "0"):
                self.stats["retries"] += 1
                server.stats["retries"] += 1

        return AsyncOpenAI(base_url=server.url, api_key=self.cfg.resolved_api_key(), timeout=self.cfg.timeout_s,
                           max_retries=int(self.cfg.max_retries),
                           http_client=DefaultAsyncHttpxClient(event_hooks={"request": [count_retry]}))

    @contextlib.asynccontextmanager
    async def _pool(self):
        router = Router(self.servers, self.cfg.max_concurrency, self.cfg.revive_after_s)
        async with contextlib.AsyncExitStack() as stack:
            clients = {s.url: await stack.enter_async_context(self._client(s)) for s in self.servers}
            yield _Pool(router, clients)

    def _request_kwargs(self, req: GenerationRequest, sampling: Sampling) -> dict[str, Any]:
        body: dict[str, Any] = dict(self.cfg.extra_body or {})
        if self.cfg.chat_template_kwargs:
            body["chat_template_kwargs"] = {**dict(body.get("chat_template_kwargs") or {}),
                                            **dict(self.cfg.chat_template_kwargs)}
        kwargs: dict[str, Any] = {
            "model": req.model or self.model, "messages": req.messages, "n": req.n,
            "temperature": sampling.temperature, "top_p": sampling.top_p,
            "max_tokens": self.cfg.max_tokens if self.cfg.max_tokens is not None else sampling.max_tokens,
            "extra_body": body or None,
        }
        if self.cfg.reasoning_effort is not None:
            kwargs["reasoning_effort"] = self.cfg.reasoning_effort
        if req.seed is not None:
            kwargs["seed"] = req.seed
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        return kwargs

    def _failed(self, req: GenerationRequest, msg: str) -> list[Completion]:
        self.stats["failures"] += 1
        return [Completion(status="request_failed", error=_short(msg, 600)) for _ in range(req.n)]

    def _no_server_left(self, router: Router, errors: list[str]) -> str:
        """Why a request found no server (left) to run on: every server down, or failed on each tried."""
        n, retries = len(self.servers), f"after {self.cfg.max_retries} retries each"
        live = router.live()
        if not live:
            what = "the server" if n == 1 else f"all {n} servers"
            return (f"{what} of endpoint {self.model!r} {'is' if n == 1 else 'are'} down ({retries}): "
                    + "; ".join(f"{s.url}: {s.last_error}" for s in self.servers))
        return f"failed on every server tried ({len(live)} of {n} live, {retries}): " + "; ".join(errors)

    async def _one(self, pool: _Pool, req: GenerationRequest, sampling: Sampling) -> list[Completion]:
        # lazy: see _client (the OpenAI client is slow to import)
        import openai

        kwargs = self._request_kwargs(req, sampling)
        self.stats["requests"] += 1
        tried: list[str] = []
        errors: list[str] = []
        while True:
            server = await pool.router.acquire(tried)
            if server is None:
                msg = self._no_server_left(pool.router, errors)
                log.warning("request %s failed: %s", req.key, _short(msg))
                return self._failed(req, msg)
            if tried:
                self.stats["failovers"] += 1
            tried.append(server.url)
            server.stats["requests"] += 1
            t0 = time.monotonic()
            try:
                resp = await pool.clients[server.url].chat.completions.create(**kwargs)
            except openai.BadRequestError as e:  # 400: the same on every server, not retried
                msg = str(e)
                if any(m in msg.lower() for m in _TOO_LONG_MARKERS):
                    self.stats["too_long"] += 1
                    return [Completion(status="too_long", error=_short(msg)) for _ in range(req.n)]
                server.stats["failures"] += 1
                return self._failed(req, msg)
            except (openai.APIConnectionError, openai.InternalServerError, openai.RateLimitError) as e:
                # the SDK's retries are spent on this server: move the request to another one
                server.stats["failures"] += 1
                err = f"{type(e).__name__}: {_short(str(e), 200)}"
                errors.append(f"{server.url}: {err}")
                if isinstance(e, openai.APIConnectionError) and not isinstance(e, openai.APITimeoutError):
                    pool.router.take_out(server, err)
                    n_live = len(pool.router.live())
                    log.warning("server %s taken out (%s); %d of %d live", server.url, err, n_live, len(self.servers))
                    if n_live == 0 and len(self.servers) > 1:
                        log.error("all %d servers of endpoint %r are down; the remaining requests fail "
                                  "(re-run to resume)", len(self.servers), self.model)
                continue
            except openai.APIStatusError as e:  # other 4xx (401, 404): not retried
                server.stats["failures"] += 1
                return self._failed(req, str(e))
            finally:
                pool.router.release(server)
            pool.router.mark_ok(server)
            dt = time.monotonic() - t0
            usage = resp.usage
            choices = sorted(resp.choices, key=lambda c: c.index)
            out = [Completion(text=c.message.content or "", finish_reason=c.finish_reason,
                              latency_s=dt, reasoning=message_reasoning(c.message)) for c in choices]
            if usage is not None:
                per = (usage.completion_tokens or 0) // max(1, len(out))
                for c in out:
                    c.completion_tokens, c.prompt_tokens = per, usage.prompt_tokens or 0
            return out

    async def agenerate(self, requests: Sequence[GenerationRequest], sampling: Sampling,
                        progress: bool = False) -> list[list[Completion]]:
        async with self._pool() as pool:
            tasks = [asyncio.ensure_future(self._one(pool, r, sampling)) for r in requests]
            if progress:

                bar = tqdm(total=len(tasks), desc=f"generate ({self.model})", unit="req")
                for t in tasks:
                    t.add_done_callback(lambda _t: bar.update(1))
                try:
                    return list(await asyncio.gather(*tasks))
                finally:
                    bar.close()
            return list(await asyncio.gather(*tasks))

    def generate(self, requests: Sequence[GenerationRequest], sampling: Sampling,
                 progress: bool = False) -> list[list[Completion]]:
        return run_sync(self.agenerate(requests, sampling, progress))

    @contextlib.asynccontextmanager
    async def session(self, sampling: Sampling):
        """One set of clients and one router for callers that submit requests one at a time.

        ``async with engine.session(sampling) as submit: completions = await submit(request)``
        (used by ``verifier.judging`` so that each trajectory's waves run as soon as the
        previous wave returns, and each judgment is persisted as it completes).
        """
        async with self._pool() as pool:
            async def submit(req: GenerationRequest) -> list[Completion]:
                return await self._one(pool, req, sampling)

            yield submit


def run_sync(coro):
    """Run a coroutine from sync code, also when an event loop is already running (notebooks)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)

    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()


def _short(msg: str, n: int = 300) -> str:
    return msg if len(msg) <= n else msg[:n] + "..."
