"""Token budgets that fit: ``max_tokens`` plus the prompt must fit the model's ``max_model_len``.

vLLM rejects a request whose prompt tokens plus ``max_tokens`` exceed ``max_model_len`` (HTTP 400,
our ``too_long`` status). When the *budget* is the problem — ``max_tokens`` alone, or with the
shortest prompt of the run, does not fit — every request of the run would be rejected, so
``check_budget`` stops the run before the first request with one error naming both values. A run
where only some prompts are too long keeps the per-proof ``too_long`` status (counted, never
truncated) and gets one warning naming the longest prompt.

Where the limit comes from: a vLLM server reports ``max_model_len`` in ``GET /v1/models`` and
counts a chat prompt's tokens with ``POST /tokenize`` (same chat template as generation); the
offline engine knows both itself. Endpoints that report neither (hosted APIs) are not checked.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Sequence
from typing import Any

import requests

from verifier.engine import GenerationRequest
from verifier.errors import UserError

log = logging.getLogger(__name__)


class BudgetError(UserError, ValueError):
    """``max_tokens`` plus the prompt cannot fit the model's context."""


_LIMITS: weakref.WeakKeyDictionary[Any, int | None] = weakref.WeakKeyDictionary()


def _url(cfg: Any) -> str:
    """The first server of an endpoint (every server of a list serves the same model and flags)."""
    urls = getattr(cfg, "urls", None)
    return urls[0] if urls else str(cfg.base_url)


def _server_root(base_url: str) -> str:
    return base_url.rstrip("/").removesuffix("/v1")


def _headers(cfg: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {cfg.resolved_api_key()}"}


def max_model_len(engine: Any) -> int | None:
    """The context length the engine serves, or None when it cannot be known (cached per engine)."""
    with contextlib.suppress(TypeError):  # not weak-referenceable: not cached
        if engine in _LIMITS:
            return _LIMITS[engine]
    value: int | None = None
    cfg = getattr(engine, "cfg", None)
    if isinstance(getattr(engine, "max_model_len", None), int):  # VLLMOfflineEngine: resolved by vLLM
        value = engine.max_model_len
    elif cfg is not None and hasattr(cfg, "base_url"):  # OpenAI-compatible endpoint

        try:
            r = requests.get(_url(cfg).rstrip("/") + "/models", headers=_headers(cfg), timeout=30)
            r.raise_for_status()
            lens = [m.get("max_model_len") for m in r.json().get("data", [])]
            value = next((int(v) for v in lens if v), None)
        except (requests.RequestException, ValueError) as e:
            log.warning("budget check skipped: %s/models did not answer (%s)", _url(cfg), e)
    with contextlib.suppress(TypeError):
        _LIMITS[engine] = value
    return value


def prompt_tokens(engine: Any, req: GenerationRequest) -> int | None:
    """Tokens of one chat prompt as the engine renders it (None when the engine cannot count)."""
    if hasattr(engine, "prompt_ids"):  # offline engine
        return len(engine.prompt_ids(req))
    cfg = getattr(engine, "cfg", None)
    if cfg is None or not hasattr(cfg, "base_url"):
        return None

    body: dict[str, Any] = {"model": req.model or engine.model, "messages": req.messages,
                            "add_generation_prompt": True}
    if getattr(cfg, "chat_template_kwargs", None):
        body["chat_template_kwargs"] = dict(cfg.chat_template_kwargs)
    try:
        r = requests.post(_server_root(_url(cfg)) + "/tokenize", json=body, headers=_headers(cfg), timeout=60)
        r.raise_for_status()
        return int(r.json()["count"])
    except (requests.RequestException, ValueError, KeyError) as e:
        log.warning("budget check: could not count prompt tokens at %s/tokenize (%s)", _server_root(_url(cfg)), e)
        return None


def effective_max_tokens(engine: Any, max_tokens: int) -> int:
    """The output budget a request really asks for (an endpoint's own ``max_tokens`` wins, as in OpenAIEngine)."""
    own = getattr(getattr(engine, "cfg", None), "max_tokens", None)
    return int(own) if own is not None and hasattr(engine.cfg, "base_url") else int(max_tokens)


def check_budget(engine: Any, max_tokens: int, requests: Sequence[GenerationRequest], what: str = "max_tokens") -> None:
    """Raise ``BudgetError`` when ``max_tokens`` plus the shortest prompt of ``requests`` exceeds the
    engine's ``max_model_len`` (every request would be ``too_long``); warn when only the longest does.

    ``what`` names the setting in the message (e.g. ``judge.max_tokens``). Costs one ``/models``
    call per engine and at most two ``/tokenize`` calls per run.
    """
    limit = max_model_len(engine)
    if limit is None:
        return
    budget = effective_max_tokens(engine, max_tokens)
    if budget != max_tokens:
        what = f"endpoint.max_tokens (overrides {what}={max_tokens})"
    model = getattr(engine, "model", "?")
    if budget >= limit:
        raise BudgetError(f"{what}={budget} does not fit max_model_len={limit} of {model!r}: no prompt would fit. "
                          f"Lower {what} or serve the model with a larger max_model_len "
                          f"(python -m verifier.serve max_model_len=N)")
    if not requests:
        return
    by_len = sorted(requests, key=lambda r: sum(len(m.get("content") or "") for m in r.messages))
    shortest = prompt_tokens(engine, by_len[0])
    if shortest is not None and shortest + budget > limit:
        raise BudgetError(f"{what}={budget} plus the shortest prompt ({shortest} tokens, {by_len[0].key!r}) exceeds "
                          f"max_model_len={limit} of {model!r}: every request would be rejected as too_long. "
                          f"Lower {what} to at most {limit - shortest} or serve with max_model_len >= {shortest + budget}")
    if len(by_len) > 1:
        longest = prompt_tokens(engine, by_len[-1])
        if longest is not None and longest + budget > limit:
            log.warning("%s=%d plus the longest prompt (%d tokens, %r) exceeds max_model_len=%d of %r: such proofs "
                        "get the status too_long (counted)", what, budget, longest, by_len[-1].key, limit, model)
