"""Engine configuration safety: no remote code unless configured, API keys never printed, wave plans."""

from __future__ import annotations

import pytest

from verifier.engine import EndpointConfig
from verifier.judging import JudgeConfig, _runs, wave_plan
from verifier.serve import ServeConfig, server_args


def test_trust_remote_code_off_unless_configured():
    assert "--trust-remote-code" not in server_args(ServeConfig(model="m"))
    assert "--trust-remote-code" in server_args(ServeConfig(model="m", trust_remote_code=True))


def test_offline_engine_passes_trust_remote_code_and_cpu_flags(monkeypatch):
    import vllm

    from verifier.offline import OfflineConfig, VLLMOfflineEngine

    seen = {}

    class Recorder:  # records the vllm.LLM arguments; no model is loaded
        def __init__(self, **kw):
            seen.update(kw)

        def get_tokenizer(self):
            return None

    monkeypatch.setattr(vllm, "LLM", Recorder)
    VLLMOfflineEngine(OfflineConfig(model="m"))
    assert seen["trust_remote_code"] is False and seen["enable_chunked_prefill"] is False
    assert seen["kv_cache_memory_bytes"] == 128_000_000 and seen["enforce_eager"] is True
    VLLMOfflineEngine(OfflineConfig(model="m", trust_remote_code=True, kv_cache_memory_bytes=None,
                                    gpu_memory_utilization=0.9))
    assert seen["trust_remote_code"] is True and seen["gpu_memory_utilization"] == 0.9


def test_api_key_not_in_args_or_repr(monkeypatch):
    args = server_args(ServeConfig(model="m", api_key="sekret"))
    assert not any("sekret" in a for a in args)
    assert "sekret" not in repr(EndpointConfig(api_key="sekret")) and "sekret" not in str(EndpointConfig(api_key="sekret"))
    monkeypatch.setenv("VERIFIER_API_KEY", "from-env")
    assert EndpointConfig().resolved_api_key() == "from-env"
    assert EndpointConfig(api_key="cfg").resolved_api_key() == "cfg"


def test_wave_plans_cover_every_pass_once():
    for n in range(1, 12):
        for waves in ([1, 1, 2, 4], [2], [3, 1], None):
            plan = wave_plan(n, waves)
            assert [i for s, m in plan for i in range(s, s + m)] == list(range(n))
    with pytest.raises(ValueError):
        wave_plan(8, [0, 2])
    assert _runs([0, 1, 2, 5, 6, 9]) == [(0, 3), (5, 2), (9, 1)]
    assert JudgeConfig().aggregation().n == 8
