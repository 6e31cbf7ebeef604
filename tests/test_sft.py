"""SFT warm start (training/sft.py): TRL SFTTrainer on gold verifications lowers their loss."""

from __future__ import annotations

import json

import pytest

from training.sft import SFTRunConfig, gold_text, sft_dataset, sft_train
from verifier.parser import parse_verification


def _completion_loss(model_dir, ds) -> float:
    """Mean token loss of the gold completions given their prompts (the SFT objective)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    losses = []
    for row in ds:
        p = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
        p_ids = tok(p, add_special_tokens=False)["input_ids"]
        ids = tok(full, add_special_tokens=False)["input_ids"]
        labels = [-100] * len(p_ids) + ids[len(p_ids):]
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels]))
        losses.append(out.loss.item())
    return sum(losses) / len(losses)


def test_sft_lowers_gold_completion_loss(tmp_path, tiny_model):
    from data_pipeline.synthetic import generate_synthetic
    from verifier.config import compose

    cfg = compose("sft", SFTRunConfig, [f"output_dir={tmp_path / 'sft'}", f"model.name_or_path={tiny_model}",
                                        "max_steps=12", "per_device_train_batch_size=4", "learning_rate=3e-3",
                                        "warmup_steps=2", "logging_steps=4", "style=minimal",
                                        "data.prompt_template=verify_compact"])
    task = dict(min_steps=3, max_steps=3, max_operand=9, recoverable_rate=0.0, qe_fraction=0.0)
    train = generate_synthetic(48, seed=1, **task)
    held = generate_synthetic(8, seed=99, **task)
    held_ds = sft_dataset(held, "minimal", template="verify_compact")
    before = _completion_loss(str(tiny_model), held_ds)
    final = sft_train(cfg, train)
    after = _completion_loss(str(final), held_ds)
    assert after < before - 1.0, (before, after)  # held-out gold texts became much more likely
    log = json.loads((tmp_path / "sft" / "sft_log.json").read_text())
    assert [h["step"] for h in log if "loss" in h] == [4, 8, 12]


@pytest.mark.parametrize("style", ["minimal", "short", "stepwise"])
def test_gold_texts_parse_to_the_annotation(style):
    from data_pipeline.synthetic import generate_synthetic

    for t in generate_synthetic(6, seed=3, valid_fraction=0.5):
        out = parse_verification(gold_text(t, style), len(t.proof_steps))
        assert out.ok and out.verdict is t.annotation.polarity
        assert out.first_error_step == t.annotation.first_fatal_error_step
