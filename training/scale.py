"""Scale checks: a real-model run that still carries tiny-profile (toy) values stops before anything loads.

The tiny model is ``verifier.tiny_model`` or any model below :data:`TINY_MODEL_MAX_PARAMS` (estimated from
its ``config.json``); any other model with toy budgets or data caps raises :class:`ToyScaleError` naming
every key (``smoke=true``: one warning instead). Used by ``training/grpo.py``, ``training/prover_grpo.py`` (its own
data values, :func:`budget_toy_values`) and ``training/sft.py``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from huggingface_hub import try_to_load_from_cache

from training.config import DEFAULT_TINY_MODEL, REPO, DataConfig, GRPORunConfig
from verifier.errors import UserError

log = logging.getLogger("training.scale")

TOY_TOKENS = 64  # a completion or held-out budget at or below this is a tiny-profile value
TOY_RECORDS = 256  # a data cap at or below this is a tiny-profile value
TINY_MODEL_MAX_PARAMS = 50_000_000  # a model below this (estimated from config.json) is a tiny model


class ToyScaleError(UserError, ValueError):
    """A real-model run that still carries tiny-profile values (raised before anything is loaded)."""


def model_param_estimate(path: str) -> int | None:
    """Parameters of a local Hugging Face model estimated from its ``config.json`` (None: not local).

    Follows a PEFT adapter folder to its base model. Embeddings + per-layer attention and MLP.
    """
    p = Path(path)
    if (p / "adapter_config.json").exists() and not (p / "config.json").exists():
        base = json.loads((p / "adapter_config.json").read_text()).get("base_model_name_or_path")
        return model_param_estimate(base) if base else None
    cfg_file = p / "config.json"
    if not cfg_file.exists():
        try:  # a hub id already in the local cache (never downloads)
            cached = try_to_load_from_cache(path, "config.json")
        except Exception:  # not a valid repo id
            cached = None
        if not isinstance(cached, str):
            return None
        cfg_file = Path(cached)
    c = json.loads(cfg_file.read_text())
    c = c.get("text_config", c)
    h = c.get("hidden_size") or c.get("n_embd") or c.get("d_model")
    layers = c.get("num_hidden_layers") or c.get("n_layer") or c.get("num_layers")
    vocab = c.get("vocab_size")
    if not (h and layers and vocab):
        return None
    inter = c.get("intermediate_size") or c.get("n_inner") or 4 * h
    experts = c.get("num_experts") or c.get("num_local_experts") or 1
    emb = vocab * h * (1 if c.get("tie_word_embeddings", True) else 2)
    return int(emb + layers * (4 * h * h + 3 * h * inter * experts))


def is_tiny_model(path: str) -> bool:
    """True for the tiny local model (``verifier.tiny_model``, or anything as small), built or not."""
    if path in (DEFAULT_TINY_MODEL, str(REPO / DEFAULT_TINY_MODEL)) and not (Path(path) / "config.json").exists():
        return True  # built on demand by ensure_model
    n = model_param_estimate(path)
    return n is not None and n < TINY_MODEL_MAX_PARAMS


def data_toy_values(data: DataConfig, need_eval_cap: bool = True) -> list[str]:
    """The tiny-profile values of a data config: synthetic data, no real data path, small caps."""
    bad = []
    if data.source == "synthetic":
        bad.append("data.source=synthetic (the tiny stand-in; real runs read data.source=jsonl "
                   "data.train_path=<trajectories JSONL>)")
    elif not data.train_path:
        bad.append(f"data.train_path=null (data.source={data.source} needs a real data file)")
    if data.n_train and data.n_train <= TOY_RECORDS:
        bad.append(f"data.n_train={data.n_train} (a cap of <= {TOY_RECORDS} records; null = all)")
    if need_eval_cap and data.n_eval and data.n_eval <= TOY_RECORDS:
        bad.append(f"data.n_eval={data.n_eval} (a cap of <= {TOY_RECORDS} held-out records; null = all)")
    return bad


def budget_toy_values(cfg: GRPORunConfig) -> list[str]:
    """The tiny-profile values of a GRPO run's budgets: the completion and the held-out judge's."""
    bad = []
    g, ev = cfg.grpo, cfg.eval
    if cfg.train and g.max_completion_length <= TOY_TOKENS:
        bad.append(f"grpo.max_completion_length={g.max_completion_length} (<= {TOY_TOKENS} tokens)")
    if ev.enabled:
        if ev.judge.max_tokens <= TOY_TOKENS:
            bad.append(f"eval.judge.max_tokens={ev.judge.max_tokens} (<= {TOY_TOKENS} tokens)")
        elif cfg.train and ev.judge.max_tokens < g.max_completion_length:
            bad.append(f"eval.judge.max_tokens={ev.judge.max_tokens} (below grpo.max_completion_length="
                       f"{g.max_completion_length}: held-out verifications would be cut short)")
    return bad


def toy_values(cfg: GRPORunConfig) -> list[str]:
    """Every key of a verifier GRPO run that carries a tiny-profile value, each with the reason."""
    return data_toy_values(cfg.data, need_eval_cap=cfg.eval.enabled) + budget_toy_values(cfg)


def raise_on_toy_values(model_path: str, bad: list[str], profile_hint: str = "profile=cluster",
                        smoke: bool = False) -> None:
    """Raise :class:`ToyScaleError` naming every offending key unless the model is the tiny one.

    ``smoke=true`` (a deliberate smoke run of a real model at toy sizes, e.g. the SmolLM2 CPU tests)
    turns the error into one warning that names the same keys.
    """
    if bad and not is_tiny_model(model_path) and smoke:
        log.warning("smoke=true: model %r runs with tiny-profile values: %s", model_path, "; ".join(bad))
        return
    if bad and not is_tiny_model(model_path):
        raise ToyScaleError(
            f"model {model_path!r} is not the tiny model, but the run carries tiny-profile values; "
            f"select {profile_hint} or set each of them:\n  " + "\n  ".join(bad))

