"""The tiny local model: deterministic, standard HF format, loads in transformers and TRL."""

import hashlib

import torch

from verifier.tiny_model import TinyModelConfig, build


def _digest(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())
            if p.suffix in (".safetensors", ".json") and p.name != "TINY_MODEL.json"}


def test_deterministic_for_a_seed(tmp_path, tiny_model):
    again = build(TinyModelConfig(out=str(tmp_path / "again"), seed=0))
    assert _digest(again) == _digest(tiny_model)
    other = build(TinyModelConfig(out=str(tmp_path / "other"), seed=1))
    assert _digest(other)["model.safetensors"] != _digest(tiny_model)["model.safetensors"]


def test_loads_in_transformers_with_chat_template(tiny_model, tiny_lora):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    assert tok.pad_token == "<|endoftext|>" and tok.eos_token == "<|im_end|>"
    text = tok.apply_chat_template([{"role": "user", "content": "Step 0: 1+1=2"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    ids = tok(text, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 5 or out[0, -1].item() == tok.eos_token_id
    lora = PeftModel.from_pretrained(model, tiny_lora)
    with torch.no_grad():
        assert not torch.allclose(lora(ids).logits, AutoModelForCausalLM.from_pretrained(tiny_model)(ids).logits)


def test_loads_in_trl(tiny_model, tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": "Is 1+1=2 valid?"}]}] * 4)
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=8, max_steps=1, report_to=[], use_cpu=True, logging_steps=1,
                      save_strategy="no")
    trainer = GRPOTrainer(model=str(tiny_model), reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                          args=args, train_dataset=ds)
    assert trainer.model.config.model_type == "qwen2"
    trainer.train()
    assert trainer.state.global_step == 1
