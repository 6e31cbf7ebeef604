"""Engine layer: the one interface through which every caller talks to a model.

Two implementations with the same sampling semantics:

* ``OpenAIEngine`` - any OpenAI-compatible server (vLLM first) on the ``openai``
  async client: bounded concurrency, per-request timeout, retries with backoff on
  connection errors and 5xx, API key, ``n`` samples in one request (shared prefill),
  model or LoRA-adapter name selectable.
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
import contextlib
import hashlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

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


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling parameters shared by all engines (temperature 1.0 as in section 5.1)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    stop: tuple[str, ...] = ()


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
    """The thinking a vLLM reasoning parser split off (``reasoning_content`` or ``reasoning``), or "".

    >>> from types import SimpleNamespace as NS
    >>> message_reasoning(NS(reasoning_content="hmm", content="x")), message_reasoning(NS(content="x"))
    ('hmm', '')
    """
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None)
        if value is None:
            value = (getattr(message, "model_extra", None) or {}).get(name)
        if isinstance(value, str) and value:
            return value
    return ""


class Engine(Protocol):
    """What every caller uses: a batch of requests in, ``n`` completions per request out."""

    model: str

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig,
                 progress: bool = False) -> list[list[Completion]]: ...

    async def agenerate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
                        ) -> list[list[Completion]]: ...


# the values vLLM's OpenAI server accepts (gpt-oss: low | medium | high; "none" turns thinking off)
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


@dataclass
class EndpointConfig:
    """An OpenAI-compatible endpoint (a vLLM server, or any provider)."""

    base_url: str = "http://127.0.0.1:8000/v1"
    api_key: str | None = None  # default: env VERIFIER_API_KEY, then OPENAI_API_KEY, else "EMPTY"
    model: str = "artifacts/tiny-model"
    max_concurrency: int = 64
    timeout_s: float = 600.0
    max_retries: int = 4
    backoff_s: float = 1.0
    # dict sent with each request, e.g. {"structured_outputs": {"regex": ...}}; Any so that a
    # command-line override `endpoint.extra_body={...}` assigns a dict (no `+` needed).
    extra_body: Any = None
    # Reasoning models: the per-request output budget (None: the caller's sampling.max_tokens),
    # reasoning effort (gpt-oss: low | medium | high; None: the server's default) and chat-template
    # arguments (e.g. {enable_thinking: false} for Qwen3), sent with every request.
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    chat_template_kwargs: Any = None

    def __post_init__(self) -> None:
        if self.max_tokens is not None and int(self.max_tokens) < 1:
            raise ValueError(f"endpoint {self.model!r}: max_tokens must be >= 1 or null, got {self.max_tokens}")
        if self.reasoning_effort not in (None, *REASONING_EFFORTS):
            raise ValueError(f"endpoint {self.model!r}: reasoning_effort must be one of {', '.join(REASONING_EFFORTS)} "
                             f"or null, got {self.reasoning_effort!r}")
        if self.chat_template_kwargs is not None and not isinstance(self.chat_template_kwargs, dict):
            raise ValueError(f"endpoint {self.model!r}: chat_template_kwargs must be a mapping, "
                             f"got {type(self.chat_template_kwargs).__name__}")

    def request_options(self) -> dict[str, Any]:
        """The reasoning options that change samples (for cache keys and run records)."""
        out: dict[str, Any] = {}
        if self.max_tokens is not None:
            out["max_tokens"] = int(self.max_tokens)
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        if self.chat_template_kwargs:
            out["chat_template_kwargs"] = dict(self.chat_template_kwargs)
        return out

    def resolved_api_key(self) -> str:
        return self.api_key or os.environ.get("VERIFIER_API_KEY") or os.environ.get("OPENAI_API_KEY") or "EMPTY"

    def __repr__(self) -> str:  # never print the key
        return f"EndpointConfig(base_url={self.base_url!r}, model={self.model!r}, api_key=***)"


_TOO_LONG_MARKERS = ("maximum context length", "context length", "too long", "max_model_len",
                     "longer than the maximum", "exceeds the model")


class OpenAIEngine:
    """Async client for an OpenAI-compatible server; ``generate`` wraps ``agenerate``."""

    def __init__(self, cfg: EndpointConfig):
        self.cfg = cfg
        self.model = cfg.model
        self.stats = {"requests": 0, "retries": 0, "failures": 0, "too_long": 0}

    def _client(self):
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=self.cfg.base_url, api_key=self.cfg.resolved_api_key(),
                           timeout=self.cfg.timeout_s, max_retries=0)

    async def _one(self, client, sem: asyncio.Semaphore, req: GenerationRequest,
                   sampling: SamplingConfig) -> list[Completion]:
        import openai

        body: dict[str, Any] = dict(self.cfg.extra_body or {})
        if self.cfg.chat_template_kwargs:
            body["chat_template_kwargs"] = {**dict(body.get("chat_template_kwargs") or {}),
                                            **dict(self.cfg.chat_template_kwargs)}
        kwargs: dict[str, Any] = dict(
            model=req.model or self.model, messages=req.messages, n=req.n,
            temperature=sampling.temperature, top_p=sampling.top_p,
            max_tokens=self.cfg.max_tokens if self.cfg.max_tokens is not None else sampling.max_tokens,
        )
        if self.cfg.reasoning_effort is not None:
            kwargs["reasoning_effort"] = self.cfg.reasoning_effort
        if req.seed is not None:
            kwargs["seed"] = req.seed
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        attempt = 0
        async with sem:
            while True:
                t0 = time.monotonic()
                try:
                    self.stats["requests"] += 1
                    resp = await client.chat.completions.create(extra_body=body or None, **kwargs)
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
                except openai.BadRequestError as e:  # 400: not retried
                    msg = str(e)
                    if any(m in msg.lower() for m in _TOO_LONG_MARKERS):
                        self.stats["too_long"] += 1
                        return [Completion(status="too_long", error=_short(msg)) for _ in range(req.n)]
                    self.stats["failures"] += 1
                    return [Completion(status="request_failed", error=_short(msg)) for _ in range(req.n)]
                except (openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError,
                        openai.RateLimitError) as e:
                    attempt += 1
                    if attempt > self.cfg.max_retries:
                        self.stats["failures"] += 1
                        log.warning("request %s failed after %d retries: %s", req.key, attempt - 1, _short(str(e)))
                        return [Completion(status="request_failed", error=_short(str(e))) for _ in range(req.n)]
                    self.stats["retries"] += 1
                    await asyncio.sleep(self.cfg.backoff_s * 2 ** (attempt - 1))
                except openai.APIStatusError as e:  # other 4xx (401, 404): not retried
                    self.stats["failures"] += 1
                    return [Completion(status="request_failed", error=_short(str(e))) for _ in range(req.n)]

    async def agenerate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig,
                        progress: bool = False) -> list[list[Completion]]:
        sem = asyncio.Semaphore(self.cfg.max_concurrency)
        async with self._client() as client:
            tasks = [asyncio.ensure_future(self._one(client, sem, r, sampling)) for r in requests]
            if progress:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(tasks), desc=f"generate ({self.model})", unit="req")
                for t in tasks:
                    t.add_done_callback(lambda _t: bar.update(1))
                try:
                    return list(await asyncio.gather(*tasks))
                finally:
                    bar.close()
            return list(await asyncio.gather(*tasks))

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig,
                 progress: bool = False) -> list[list[Completion]]:
        return run_sync(self.agenerate(requests, sampling, progress))

    @contextlib.asynccontextmanager
    async def session(self, sampling: SamplingConfig):
        """One client and one concurrency bound for callers that submit requests one at a time.

        ``async with engine.session(sampling) as submit: completions = await submit(request)``
        (used by ``verifier.judging`` so that each trajectory's waves run as soon as the
        previous wave returns, and each judgment is persisted as it completes).
        """
        sem = asyncio.Semaphore(self.cfg.max_concurrency)
        async with self._client() as client:
            async def submit(req: GenerationRequest) -> list[Completion]:
                return await self._one(client, sem, req, sampling)

            yield submit


def run_sync(coro):
    """Run a coroutine from sync code, also when an event loop is already running (notebooks)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()


def _short(msg: str, n: int = 300) -> str:
    return msg if len(msg) <= n else msg[:n] + "..."
