"""Reasoning models as verifier and meta-verifier (issue 13): thinking, budgets, truncation.

Real vLLM servers: ``reasoning_server`` serves the tiny model with ``<think>`` tokens under vLLM's
``deepseek_r1`` reasoning parser (the answer in ``content``, the thinking in ``reasoning_content``);
the session ``vllm_server`` has no reasoning parser (the thinking stays in the text and our parser
handles it). Guided decoding makes the random model think first, drafting the *opposite* verdict
inside its thinking, then answer: a verdict taken from the thinking would be caught.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from verifier.config import EndpointConfig, Sampling
from verifier.engine import GenerationRequest, OpenAIEngine
from verifier.judging import JudgeConfig
from verifier.judgment import Judgment
from verifier.runner import judge_trajectories
from verifier.records import Annotation, ParseStatus, ProofTrajectory, Verdict, VerificationOutput
from verifier.templates import as_messages, meta_verification_prompt

VALID = "<final_answer>\nverdict: valid\nfirst_error_step: -1\n</final_answer>"
INVALID = "<final_answer>\nverdict: invalid\nfirst_error_step: [0-2]\n</final_answer>"
DRAFT_THEN_ANSWER = f"<think>draft {VALID} [a-z]{{1,8}}</think>\n{INVALID}"  # drafts valid, answers invalid
LONG_THINKING = f"<think>draft {VALID}[a-z ]{{200,300}}</think>\n{INVALID}"  # cut by a small budget
UNCLOSED = f"<think>draft {VALID}"  # the model stops inside its thinking
GRADES = "(EXACT_MATCH|BASIC_MATCH|POOR_MATCH|WRONG_POLARITY)"
THINK_GRADE = f"<think>[a-z ]{{1,12}}</think>\n<final_answer>\ngrade: {GRADES}\n</final_answer>"

TRAJS = [ProofTrajectory(id=f"r{i}", problem_id=f"p{i}", problem=f"Show that {i} + {i} = {2 * i}.",
                         proof_steps=(f"{i} + {i} = {2 * i}.", "Hence the claim.", "Done."),
                         annotation=Annotation(first_fatal_error_step=1))
         for i in range(2)]


def guided(ep: EndpointConfig, regex: str, **changes) -> EndpointConfig:
    return dataclasses.replace(ep, extra_body={"structured_outputs": {"regex": regex}}, **changes)


# ------------------------------------------------------------------------------ what the meta-verifier sees


def test_meta_verifier_sees_rationale_not_private_reasoning_by_default():
    out = VerificationOutput(ParseStatus.OK, Verdict.INVALID, 1, "Step 1 is wrong.", reasoning="SECRET-THOUGHTS")
    hidden = meta_verification_prompt(TRAJS[0], out)
    assert "Step 1 is wrong." in hidden and "Model verdict: invalid" in hidden and "SECRET-THOUGHTS" not in hidden
    shown = meta_verification_prompt(TRAJS[0], out, show_reasoning=True)
    assert "SECRET-THOUGHTS" in shown and "Step 1 is wrong." in shown


def test_endpoint_options_validated_and_in_cache_fingerprint():
    from verifier.judging import engine_fingerprint

    with pytest.raises(ValueError, match="reasoning_effort"):
        EndpointConfig(model="m", reasoning_effort="extreme")
    with pytest.raises(ValueError, match="max_tokens"):
        EndpointConfig(model="m", max_tokens=0)
    a = engine_fingerprint(OpenAIEngine(EndpointConfig(model="m")))
    b = engine_fingerprint(OpenAIEngine(EndpointConfig(model="m", max_tokens=8192, reasoning_effort="high")))
    c = engine_fingerprint(OpenAIEngine(EndpointConfig(model="m", chat_template_kwargs={"enable_thinking": False})))
    assert a == "m" and len({a, b, c}) == 3  # a cached pass is never reused under another budget / effort


def test_grpo_config_passes_truncation_mask_and_policy_template_kwargs(tmp_path):
    from training.config import GRPORunConfig
    from training.trainer import grpo_config
    from verifier.config import compose

    cfg = compose("grpo", GRPORunConfig, ["experiment=smoke", f"output_dir={tmp_path}",
                                          "grpo.mask_truncated_completions=true",
                                          "grpo.chat_template_kwargs={enable_thinking: false}",
                                          "reward.meta.endpoint.max_tokens=8192", "reward.meta.endpoint.reasoning_effort=high"])
    g = grpo_config(cfg, tmp_path, [1.0], report_wandb=False)
    assert g.mask_truncated_completions is True and g.chat_template_kwargs == {"enable_thinking": False}
    assert cfg.reward.meta.endpoint.max_tokens == 8192 and cfg.reward.meta.endpoint.reasoning_effort == "high"


# ------------------------------------------------------------------------------ engine on the real server


def test_budget_effort_and_template_kwargs_reach_the_server(reasoning_endpoint):
    """Per-endpoint max_tokens wins over the caller's; effort and chat-template kwargs reach the template."""
    req = [GenerationRequest(as_messages("Is 2 + 2 = 4?"), n=1, seed=3)]
    sampling = Sampling(max_tokens=40)

    def one(**changes):
        [[c]] = OpenAIEngine(dataclasses.replace(reasoning_endpoint, **changes)).generate(req, sampling)
        assert c.status == "ok", c.error
        return c

    base = one()
    capped = one(max_tokens=5)
    assert capped.completion_tokens == 5 and capped.finish_reason == "length"
    assert base.completion_tokens > 5
    # the think model's template closes an empty <think> in the prompt when enable_thinking is false
    # and writes a "Reasoning: <effort>" system line: both lengthen the prompt the server rendered
    assert one(chat_template_kwargs={"enable_thinking": False}).prompt_tokens > base.prompt_tokens
    assert one(reasoning_effort="high").prompt_tokens > base.prompt_tokens


# ------------------------------------------------------------------------------ verifier: item 5 (a)-(c)


def test_verdict_comes_from_the_answer_and_reasoning_is_stored(reasoning_endpoint):
    """(a) + (b) with the server's reasoning parser: the draft `valid` inside the thinking is ignored."""
    engine = OpenAIEngine(guided(reasoning_endpoint, DRAFT_THEN_ANSWER))
    judgments = judge_trajectories(TRAJS, engine, JudgeConfig(n=2, max_tokens=256))
    for j in judgments:
        assert j.verdict is Verdict.INVALID and j.aggregate.n_reject == 2, [p.detail for p in j.passes]
        row = json.loads(json.dumps(j.to_row()))
        for p in row["passes"]:
            assert p["parse_status"] == "ok" and p["verdict"] == "invalid" and p["finish_reason"] == "stop"
            assert p["reasoning"].startswith("draft") and "verdict: valid" in p["reasoning"]  # stored...
            assert "verdict: valid" not in p["text"] and "<think>" not in p["text"]  # ...apart from the answer
        back = Judgment.from_row(row)
        assert [q.reasoning for q in back.passes] == [q.reasoning for q in j.passes]


def test_thinking_in_the_text_without_a_server_parser(endpoint):
    """Without --reasoning-parser the thinking stays in the text: the parser reads only the answer."""
    engine = OpenAIEngine(guided(endpoint, DRAFT_THEN_ANSWER))
    [j] = judge_trajectories(TRAJS[:1], engine, JudgeConfig(n=2, max_tokens=256))
    assert all(p.ok and p.verdict is Verdict.INVALID for p in j.passes), [p.detail for p in j.passes]
    assert all("<think>" in p.raw_text and p.reasoning.startswith("draft") for p in j.passes)
    assert all("verdict: valid" not in p.rationale for p in j.passes)
    # the model stops inside its thinking after drafting a block: no verdict, a rejection under pessimism
    [u] = judge_trajectories(TRAJS[:1], OpenAIEngine(guided(endpoint, UNCLOSED)), JudgeConfig(n=2, max_tokens=256))
    assert [p.status for p in u.passes] == [ParseStatus.UNCLOSED_THINKING] * 2
    assert u.verdict is Verdict.INVALID and u.aggregate.n_unparseable == 2 and u.aggregate.n_accept == 0


@pytest.mark.parametrize("server", ["reasoning", "plain"])
def test_response_cut_inside_the_thinking_is_truncated(server, request):
    """(c) The budget ends the output inside the thinking: `truncated` on every pass, never a verdict."""
    ep = request.getfixturevalue("reasoning_endpoint" if server == "reasoning" else "endpoint")
    engine = OpenAIEngine(guided(ep, LONG_THINKING, max_tokens=48))  # the endpoint's budget, not the judge's 512
    [j] = judge_trajectories(TRAJS[:1], engine, JudgeConfig(n=2, max_tokens=512))
    for p in j.passes:
        assert p.status is ParseStatus.TRUNCATED and p.verdict is None, p.detail
        assert p.finish_reason == "length" and "inside the thinking" in p.detail
        assert p.reasoning.startswith("draft")  # the partial thinking is kept
    assert j.verdict is Verdict.INVALID and j.aggregate.n_unparseable == 2  # pessimism: a rejection
    assert [p["parse_status"] for p in j.to_row()["passes"]] == ["truncated", "truncated"]


# ------------------------------------------------------------------------------ meta-verifier: item 5 (d)


def _reward_columns(n_per: int = 2) -> tuple[list, dict]:
    text = "Step 1 does not follow.\n<final_answer>\nverdict: invalid\nfirst_error_step: 1\n</final_answer>"
    completions = [[{"role": "assistant", "content": text}]] * (len(TRAJS) * n_per)
    trajs = [t for t in TRAJS for _ in range(n_per)]
    cols = {"gold_verdict": [t.gold_verdict.value for t in trajs],
            "trajectory": [json.dumps(t.to_dict()) for t in trajs]}
    return completions, cols


def test_meta_reward_budget_comes_from_the_endpoint(reasoning_endpoint):
    """A thinking judge under the old 512-style cap: explicit `truncated` failures, never a grade."""
    from training.rewards import JudgeFailureError, MetaReward

    completions, cols = _reward_columns()
    ok = MetaReward(judge="llm", endpoint=guided(reasoning_endpoint, THINK_GRADE, max_tokens=160), judge_max_tokens=4)
    rewards = asyncio.run(ok(completions=completions, **cols))
    assert ok.last.n_failed == 0 and all(r in (0.0, 0.25, 0.5, 1.0) for r in rewards)
    small = MetaReward(judge="llm", endpoint=guided(reasoning_endpoint, THINK_GRADE, max_tokens=4))
    with pytest.raises(JudgeFailureError, match="truncated"):
        asyncio.run(small(completions=completions, **cols))


@pytest.mark.slow
def test_llm_meta_reward_through_a_reasoning_judge_in_a_grpo_step(tmp_path, tiny_model, reasoning_endpoint):
    """(d) One real TRL GRPO step whose Meta-Ver-RL reward comes from a thinking meta-verifier."""
    from training.config import GRPORunConfig
    from training.grpo import run
    from verifier.config import compose

    out = tmp_path / "think"
    cfg = compose("grpo", GRPORunConfig, ["experiment=smoke", f"output_dir={out}", f"model.name_or_path={tiny_model}",
                                          "grpo.max_steps=1", "grpo.save_steps=1", "reward.meta.kind=llm",
                                          "reward.format_gate=false", "reward.meta.max_tokens=4",
                                          "grpo.mask_truncated_completions=true",
                                          "eval.enabled=false", "wandb.enabled=false"])
    cfg.reward.meta.endpoint = guided(reasoning_endpoint, THINK_GRADE, max_tokens=160)  # thinking fits this budget
    run(cfg)
    [step] = [h for h in json.loads((out / "train_log.json").read_text()) if "meta/judge_latency_s" in h]
    assert step["meta/judge_failures"] == 0
    assert sum(step[f"meta/grade_frac/{g}"] for g in GRADES.strip("()").split("|")) == pytest.approx(1.0)
    saved = json.loads((out / "config.json").read_text())  # the choices are part of the run's config
    assert saved["reward"]["meta"]["show_reasoning"] is False and saved["reward"]["meta"]["endpoint"]["max_tokens"] == 160
    assert saved["grpo"]["mask_truncated_completions"] is True
