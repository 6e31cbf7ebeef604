"""The policy model: built on demand (the tiny model), loaded with its tokenizer and LoRA config, and the
final weights saved by every rank (LoRA: the adapter plus a merged copy for vLLM)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from training.config import DEFAULT_TINY_MODEL, REPO, GRPORunConfig, ModelConfig
from verifier.errors import InputError
from verifier.tiny_model import TinyModelConfig, build

log = logging.getLogger("training.model")


def ensure_model(path: str) -> str:
    """Build the tiny model when the configured path is the default one and missing."""
    p = Path(path)
    if path in (DEFAULT_TINY_MODEL, str(REPO / DEFAULT_TINY_MODEL)) and not (p / "config.json").exists():
        log.info("building the tiny model at %s", p)
        build(TinyModelConfig(out=str(p)))
    return path


def load_model(cfg: ModelConfig, path: str | None = None):
    """(model, tokenizer, peft_config or None) for a model config."""
    # lazy: torch and transformers take seconds to import; configs and checks import this module without them
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ensure_model(path or cfg.name_or_path)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}
    if cfg.dtype not in dtype:
        raise InputError(f"model.dtype must be one of {sorted(dtype)}, got {cfg.dtype!r}")
    kw: dict[str, Any] = {"dtype": dtype[cfg.dtype], "trust_remote_code": cfg.trust_remote_code}
    if cfg.attn_implementation:
        kw["attn_implementation"] = cfg.attn_implementation
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=cfg.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, **kw)
    peft_config = None
    if cfg.lora.enabled:
        # lazy: peft is only needed when LoRA is on (and takes a second to import)
        from peft import LoraConfig

        tm = cfg.lora.target_modules
        peft_config = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                                 target_modules=list(tm) if isinstance(tm, (list, tuple)) else tm,
                                 task_type="CAUSAL_LM")
    return model, tokenizer, peft_config


def save_final(trainer, tokenizer, out: Path, cfg: GRPORunConfig, lora: bool) -> Path:
    """Every rank saves the final weights; returns the directory vLLM evaluates (all ranks agree on it).

    ``trainer.save_model`` is collective under DeepSpeed ZeRO-3 (it gathers the shards) and writes on
    the main process only, so every rank must call it. LoRA: ``DIR/final`` holds the adapter, and the
    main process also writes ``DIR/final_merged`` (base + adapter merged, reloaded from disk on CPU,
    no collective), which vLLM loads like any model. The ranks meet once more after that.
    """
    final = out / "final"
    trainer.save_model(str(final))
    acc = trainer.accelerator
    if acc.is_main_process:
        tokenizer.save_pretrained(str(final))
        if lora:
            merge_adapter(cfg.init_from or cfg.model.name_or_path, final, out / "final_merged", cfg.model)
            tokenizer.save_pretrained(str(out / "final_merged"))
    acc.wait_for_everyone()
    return out / "final_merged" if lora else final


def merge_adapter(base: str, adapter: Path, dest: Path, model_cfg: ModelConfig) -> Path:
    """Base model + the saved LoRA adapter, merged and saved as a plain checkpoint (for vLLM)."""
    # lazy: torch, peft, transformers and its DeepSpeed integration take seconds to import; only a merge needs them
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from transformers.integrations import deepspeed as hf_deepspeed

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}
    # Under ZeRO-3 the trainer leaves transformers' global DeepSpeed config set, and from_pretrained would
    # then build the model inside zero.Init: a collective that only this (main) process enters, so it
    # hangs. The merge is a plain single-process load from disk: switch that global off around it.
    saved = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        m = AutoModelForCausalLM.from_pretrained(ensure_model(base), dtype=dtype[model_cfg.dtype],
                                                 trust_remote_code=model_cfg.trust_remote_code)
        merged = PeftModel.from_pretrained(m, str(adapter)).merge_and_unload()
        merged.save_pretrained(str(dest))
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved
    return dest
