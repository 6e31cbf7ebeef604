"""Start-up checks of a GRPO run before any weights load: vLLM configs and served endpoints.

A GRPO row that trains for hours and then crashes in its held-out evaluation (a vLLM config vLLM
rejects) or grades nothing (a dead meta-verifier URL) wastes the whole allocation. :func:`check`
validates, at start-up:

* every ``vllm.LLM`` the run will build, with vLLM's own config classes: the offline held-out engine
  (``eval.offline.*``) and TRL's colocate engine (``grpo.vllm_*``, TRL 1.16's ``LLM(...)`` arguments).
  When the model's ``config.json`` is on this machine (a local dir, the tiny model, the HF cache)
  ``EngineArgs(...).create_engine_config()`` builds the whole ``VllmConfig``; otherwise (a hub id
  not downloaded on a login node) the model-independent classes ``SchedulerConfig``, ``CacheConfig``
  and ``ParallelConfig`` are built with the run's values (the check that caught
  ``max_num_batched_tokens (8192) is smaller than max_model_len (16384)``).
* every served endpoint the run will call: ``GET /v1/models`` of the meta-verifier (``reward.meta.endpoint``,
  LLM meta judge) and of the verifier under test (``eval.engine=endpoint``), or the servers another recipe
  names (:func:`check`'s ``servers``: the prover's verifiers, ``training.prover_grpo.endpoints``), which must
  list the configured model name; TRL's generation server (``grpo.vllm_mode=server``) must answer ``/health/``.

Before the scale check, ``training.grpo.run`` calls :func:`check_model`: it names a starting model (``init_from``,
``model.name_or_path``) that is neither a folder here nor a hub id.
A failure raises :class:`PreflightError` naming the key (a ``verifier.errors.InputError``: one message, exit
code 2). ``preflight.enabled=false`` is not offered:
skip the endpoint part only with ``PREFLIGHT_SKIP_ENDPOINTS=1`` (e.g. a dry composition on a login node).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from pathlib import Path
from typing import Any, Callable

import requests
from huggingface_hub import try_to_load_from_cache

from training.model import ensure_model
from training.scale import is_tiny_model
from verifier.engine import served_models
from verifier.errors import InputError
from verifier.offline import llm_kwargs

log = logging.getLogger("training.preflight")


class PreflightError(InputError):
    """A vLLM config or an endpoint of a run that would fail after the weights load (names the key)."""


# ---------------------------------------------------------------------------------------------- the model

_HUB_ID = re.compile(r"[\w][\w.-]*(/[\w][\w.-]*)?")  # org/name or name: what transformers takes for a hub id


def check_model(cfg: Any) -> None:
    """The starting weights (``init_from``, else ``model.name_or_path``) are a folder here or look like a hub id."""
    key, path = ("init_from", cfg.init_from) if cfg.init_from else ("model.name_or_path", cfg.model.name_or_path)
    path = str(path)
    if Path(path).exists() or is_tiny_model(path) or _HUB_ID.fullmatch(path):
        return  # the tiny default is built on demand; a hub id is resolved by transformers / vLLM
    raise PreflightError(f"{key}={path}: no such model folder (give a local folder with config.json or a "
                         f"Hugging Face hub id such as Qwen/Qwen3-8B)")


# ---------------------------------------------------------------------------------------------- vLLM configs


def _eval_model(cfg: Any) -> str:
    """The weights the held-out engine will load (for the config check: the starting model stands in)."""
    return cfg.init_from or cfg.model.name_or_path


def vllm_engines(cfg: Any) -> list[tuple[str, dict[str, Any]]]:
    """(config key, ``vllm.LLM`` keyword arguments) of every offline vLLM engine the run will build."""
    engines: list[tuple[str, dict[str, Any]]] = []
    if cfg.eval.enabled and cfg.eval.engine == "offline":
        off = dataclasses.replace(cfg.eval.offline, model=_eval_model(cfg))
        engines.append(("eval.offline", llm_kwargs(off)))
    g = cfg.grpo
    if cfg.train and g.use_vllm and g.vllm_mode == "colocate":
        # TRL 1.16 trl/generation/vllm_generation.py: LLM(model, tensor_parallel_size, gpu_memory_utilization,
        # max_model_len=vllm_max_model_length, max_num_seqs=per_device_train_batch_size, max_num_batched_tokens=4096)
        kw: dict[str, Any] = {"model": cfg.init_from or cfg.model.name_or_path,
                              "tensor_parallel_size": g.vllm_tensor_parallel_size,
                              "gpu_memory_utilization": g.vllm_gpu_memory_utilization,
                              "max_num_seqs": g.per_device_train_batch_size * g.num_generations,
                              "max_num_batched_tokens": 4096, "trust_remote_code": cfg.model.trust_remote_code}
        mml = g.extra.get("vllm_max_model_length")
        if mml:
            kw["max_model_len"] = int(mml)
        engines.append(("grpo.vllm_*", kw))
    return engines


def _model_config_local(model: str) -> bool:
    """Whether vLLM can read the model's config without a download."""
    if (Path(model) / "config.json").exists():
        return True
    try:

        return isinstance(try_to_load_from_cache(model, "config.json"), str)
    except Exception:  # not a repo id
        return False


def validate_engine(key: str, kw: dict[str, Any]) -> str:
    """Validate one engine's arguments with vLLM's config classes; returns how ('engine_config' | 'classes')."""
    kw = dict(kw)
    memo = (key, repr(sorted(kw.items())))
    if memo in _VALID:  # the same engine arguments already passed (a sweep composed in one process)
        return _VALID[memo]
    ensure_model(kw["model"])  # the tiny default model is built on demand
    _VALID[memo] = how = _validate(key, kw)
    return how


_VALID: dict[tuple[str, str], str] = {}


def _validate(key: str, kw: dict[str, Any]) -> str:
    if _model_config_local(kw["model"]):
        # lazy: vLLM is optional (the [cpu]/[gpu] extras) and slow to import
        from vllm.engine.arg_utils import EngineArgs

        args = {k: v for k, v in kw.items() if k in {f.name for f in dataclasses.fields(EngineArgs)}}
        try:
            EngineArgs(**args).create_engine_config()
        except Exception as e:  # vLLM raises ValueError / pydantic ValidationError / TypeError
            raise _rejected(key, args, e) from e
        return "engine_config"
    return _validate_classes(key, kw)


def _validate_classes(key: str, kw: dict[str, Any]) -> str:
    """The model-independent part: scheduler, cache and parallel configs as vLLM builds them."""
    # lazy: vLLM is optional (the [cpu]/[gpu] extras) and slow to import
    from vllm.config import CacheConfig, ParallelConfig, SchedulerConfig

    try:
        max_len = kw.get("max_model_len")
        sched = {k: kw[k] for k in ("max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill")
                 if kw.get(k) is not None}
        if max_len and "max_num_batched_tokens" in sched:
            SchedulerConfig(max_model_len=int(max_len), is_encoder_decoder=False, **sched)
        # without max_num_batched_tokens (e.g. enable_chunked_prefill=false) vLLM sizes it to max_model_len: valid
        cache = {k: kw[k] for k in ("gpu_memory_utilization", "kv_cache_memory_bytes") if kw.get(k) is not None}
        CacheConfig(**cache)
        ParallelConfig(tensor_parallel_size=int(kw.get("tensor_parallel_size") or 1))
    except Exception as e:
        raise _rejected(key, kw, e) from e
    return "classes"


def _rejected(key: str, kw: dict[str, Any], e: Exception) -> PreflightError:
    """vLLM's refusal naming the keys its message mentions (``eval.offline.max_num_batched_tokens=1024``)."""
    prefix = "" if key.endswith("*") else key + "."  # grpo.vllm_*: TRL derives its arguments from several keys
    named = [f"{prefix}{k}={v}" for k, v in kw.items() if k != "model" and re.search(rf"\b{k}\b", str(e))]
    return PreflightError(f"{key}: vLLM rejects this engine config{' (' + ', '.join(named) + ')' if named else ''}: "
                          f"{type(e).__name__}: {e}; arguments {kw}")


# ---------------------------------------------------------------------------------------------- endpoints


def check_endpoint(key: str, endpoint: Any) -> list[str]:
    """Every server of an ``EndpointConfig`` answers ``/v1/models`` and serves ``endpoint.model``."""

    found: list[str] = []
    for url in endpoint.urls:
        try:
            models = served_models(url, endpoint.resolved_api_key())
        except requests.RequestException as e:
            raise PreflightError(f"{key}.base_url={url}: the server does not answer GET /models "
                                 f"({type(e).__name__}: {e}); start it first or fix the URL") from e
        if endpoint.model not in models:
            raise PreflightError(f"{key}.model={endpoint.model!r} is not served at {url}; it serves: "
                                 f"{', '.join(map(str, models)) or 'nothing'}")
        found = models
    return found


def check_generation_server(base_url: str) -> None:
    """TRL's ``trl vllm-serve`` answers ``GET /health/``."""

    try:
        requests.get(base_url.rstrip("/") + "/health/", timeout=10).raise_for_status()
    except requests.RequestException as e:
        raise PreflightError(f"grpo.vllm_server_base_url={base_url}: TRL's generation server does not answer "
                             f"/health/ ({type(e).__name__}: {e}); start `trl vllm-serve` first") from e


def eval_endpoints(cfg: Any) -> list[tuple[str, Any]]:
    """(config key, EndpointConfig) of the served model the held-out evaluation judges with (``eval.engine=endpoint``)."""
    return [("eval.endpoint", cfg.eval.endpoint)] if cfg.eval.enabled and cfg.eval.engine == "endpoint" else []


def endpoints(cfg: Any) -> list[tuple[str, Any]]:
    """(config key, EndpointConfig) of every OpenAI-compatible server a verifier run will call."""
    out = []
    uses_meta = "meta" in (cfg.reward.components or {}) or cfg.eval.enabled
    if cfg.reward.meta.kind == "llm" and uses_meta:
        out.append(("reward.meta.endpoint", cfg.reward.meta.endpoint))
    return out + eval_endpoints(cfg)


def check(cfg: Any, endpoints_too: bool | None = None,
          servers: Callable[[Any], list[tuple[str, Any]]] = endpoints) -> dict[str, Any]:
    """Validate every vLLM config and endpoint (``servers(cfg)``) of a run; returns what was checked (logged)."""
    report: dict[str, Any] = {"vllm": {}, "endpoints": {}}
    for key, kw in vllm_engines(cfg):
        report["vllm"][key] = validate_engine(key, kw)
    if endpoints_too is None:
        endpoints_too = os.environ.get("PREFLIGHT_SKIP_ENDPOINTS", "") not in ("1", "true")
    if endpoints_too:
        for key, ep in servers(cfg):
            report["endpoints"][key] = check_endpoint(key, ep)
        g = cfg.grpo
        if cfg.train and g.use_vllm and g.vllm_mode == "server" and g.vllm_server_base_url:
            check_generation_server(g.vllm_server_base_url)
            report["endpoints"]["grpo.vllm_server_base_url"] = "healthy"
    log.info("preflight: %s", report)
    return report
