"""Engine configuration safety: no remote code unless configured, API keys never printed, wave plans."""

from __future__ import annotations

import pytest

from verifier.config import EndpointConfig
from verifier.judging import JudgeConfig, wave_plan
from verifier.runner import _runs
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


def test_key_from_the_variable_api_key_env_names(monkeypatch):
    """``api_key_env`` (issue 26.2): the default falls back to $OPENAI_API_KEY; a named variable must be set."""
    for var in ("VERIFIER_API_KEY", "OPENAI_API_KEY", "MY_KEY"):
        monkeypatch.delenv(var, raising=False)
    assert EndpointConfig().resolved_api_key() == "EMPTY"
    monkeypatch.setenv("OPENAI_API_KEY", "openai")
    assert EndpointConfig().resolved_api_key() == "openai"
    with pytest.raises(ValueError, match="api_key_env=MY_KEY names an environment variable that is not set"):
        EndpointConfig(model="m", api_key_env="MY_KEY")
    monkeypatch.setenv("MY_KEY", "mine")
    assert EndpointConfig(api_key_env="MY_KEY").resolved_api_key() == "mine"
    assert "mine" not in repr(EndpointConfig(api_key_env="MY_KEY"))


def test_command_line_keys_move_to_the_environment(monkeypatch, capsys):
    """``hydra_main`` moves endpoint keys off the command line before Hydra parses it (nested, inline lists),
    warns that ``ps`` showed them, and leaves a server's ``api_key`` (no ``api_key_env``) warned only."""
    from data_pipeline.candidates import CandidatesConfig
    from training.config import GRPORunConfig
    from training.tracking import run_name
    from verifier.config import compose, keys_out_of_argv

    env: dict[str, str] = {}
    args = keys_out_of_argv(GRPORunConfig, ["experiment=meta_ver_rl", "reward.meta.endpoint.api_key=sk-A", "grpo.beta=0.1"],
                            env)
    assert args == ["experiment=meta_ver_rl", "reward.meta.endpoint.api_key_env=VERIFIER_ARGV_KEY_1", "grpo.beta=0.1"]
    assert env == {"VERIFIER_ARGV_KEY_1": "sk-A"}
    monkeypatch.setenv("VERIFIER_ARGV_KEY_1", "sk-A")
    cfg = compose("grpo", GRPORunConfig, args)
    assert cfg.reward.meta.endpoint.resolved_api_key() == "sk-A" and cfg.reward.meta.endpoint.api_key is None
    cfg.overrides = args
    assert run_name(cfg) == "meta_ver_rl,grpo.beta=0.1"
    two = "generators=[{base_url: u, model: a, api_key: sk-B}, {base_url: u, model: b, 'api_key': 'sk-C'}]"
    inline = keys_out_of_argv(CandidatesConfig, [two, "+verifier.api_key=sk-D"], env)
    assert "sk-" not in repr(inline) and env["VERIFIER_ARGV_KEY_3"] == "sk-C" and env["VERIFIER_ARGV_KEY_4"] == "sk-D"
    assert inline[1] == "+verifier.api_key_env=VERIFIER_ARGV_KEY_4"
    assert keys_out_of_argv(ServeConfig, ["api_key=sk-E", "port=1"], env) == ["api_key=sk-E", "port=1"]
    err = capsys.readouterr().err
    assert err.count("every user of this machine can read it") == 4 and "sk-" not in err
    assert "generators[i].api_key_env=NAME" in err and "api_key=*** puts" in err and "as $VERIFIER_API_KEY" in err


def test_wave_plans_cover_every_pass_once():
    for n in range(1, 12):
        for waves in ([1, 1, 2, 4], [2], [3, 1], None):
            plan = wave_plan(n, waves)
            assert [i for s, m in plan for i in range(s, s + m)] == list(range(n))
    with pytest.raises(ValueError):
        wave_plan(8, [0, 2])
    assert _runs([0, 1, 2, 5, 6, 9]) == [(0, 3), (5, 2), (9, 1)]
    assert JudgeConfig().aggregation().n == 8
