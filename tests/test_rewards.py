"""GRPO rewards (training/rewards.py): TRL contract, format gate, weights, failures, LLM judge."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import pytest

from data_pipeline.grpo_dataset import build_grpo_dataset
from training.rewards import (
    JudgeFailureError,
    MetaReward,
    RewardConfig,
    build_reward_funcs,
    format_reward,
    rough_reward,
)
from verifier.parser import format_verification
from verifier.records import Annotation, MetaGrade, MetaVerification, ParseStatus, ProofTrajectory

GRADE_REGEX = r"<final_answer>\ngrade: (EXACT_MATCH|BASIC_MATCH|POOR_MATCH|WRONG_POLARITY)\n</final_answer>"


def _trajs():
    return [
        ProofTrajectory("t-inv", "p1", "Compute 2 + 3 + 4.", ("2 + 3 = 5", "5 + 4 = 10", "So the answer is 10."),
                        annotation=Annotation(first_fatal_error_step=1, reviewer_comment="5 + 4 = 9")),
        ProofTrajectory("t-val", "p2", "Compute 1 + 1.", ("1 + 1 = 2", "So the answer is 2."),
                        annotation=Annotation(recoverable_error_steps=(0,), reviewer_comment="slip in step 0")),
    ]


def _columns(trajs, per_prompt: int):
    """TRL's reward kwargs: every dataset column repeated for each generation of its prompt."""
    ds = build_grpo_dataset(trajs)
    cols = {c: [v for v in ds[c] for _ in range(per_prompt)] for c in ds.column_names if c != "prompt"}
    return cols


def _c(text: str):
    return [{"role": "assistant", "content": text}]


COMPLETIONS = [
    # for t-inv (gold: invalid, fatal step 1)
    _c(format_verification("invalid", 1, "Step 1: 5 + 4 = 9.")),       # EXACT_MATCH
    _c(format_verification("invalid", 2, "Step 2 is off.")),           # BASIC_MATCH (near)
    _c(format_verification("valid", -1, "Looks fine.")),               # WRONG_POLARITY
    _c("I think it is invalid."),                                      # unparseable -> 0
    # for t-val (gold: valid, recoverable step 0)
    _c(format_verification("valid", -1, "Step 0 has a slip but it is fine.")),  # EXACT_MATCH (covers step 0)
    _c(format_verification("valid", -1, "All good.")),                 # BASIC_MATCH (misses step 0)
    _c(format_verification("invalid", 0, "Step 0 is wrong.")),         # WRONG_POLARITY
    _c("<final_answer>\nverdict: valid\nfirst_error_step: 1\n</final_answer>"),  # inconsistent -> 0
]


class Logger:
    def __init__(self):
        self.metrics: dict[str, list[float]] = {}
        self.extra: dict[str, list] = {}

    def log_metric(self, name, value):
        self.metrics.setdefault(name, []).append(value)

    def log_extra(self, column, values):
        self.extra.setdefault(column, []).extend(values)


def test_rule_meta_reward_grades_format_gate_and_logs():
    cols = _columns(_trajs(), 4)
    lg = Logger()
    r = MetaReward(judge="rule")
    out = asyncio.run(r(prompts=[None] * 8, completions=COMPLETIONS, log_metric=lg.log_metric,
                        log_extra=lg.log_extra, **cols))
    assert out == [1.0, 0.5, 0.0, 0.0, 1.0, 0.5, 0.0, 0.0]
    assert r.last.n_unparseable == 2 and r.last.n_judged == 6 and r.last.n_failed == 0
    assert lg.metrics["meta/grade_frac/UNPARSEABLE"] == [0.25]
    assert lg.metrics["meta/grade_frac/EXACT_MATCH"] == [0.25]
    # batch TPR: t-val rows accepted 2 of 4 (the inconsistent one did not parse); TNR: t-inv rejected 2 of 4
    assert lg.metrics["meta/batch_tpr"] == [0.5] and lg.metrics["meta/batch_tnr"] == [0.5]
    assert lg.metrics["meta/batch_parse_failure_rate"] == [0.25]
    assert lg.extra["meta_grade"][:4] == ["EXACT_MATCH", "BASIC_MATCH", "WRONG_POLARITY", "UNPARSEABLE"]
    assert lg.extra["meta_rationale"][3].startswith("format gate")
    assert "meta/judge_latency_s" in lg.metrics


def test_rough_and_format_rewards_on_trl_columns():
    cols = _columns(_trajs(), 4)
    assert rough_reward(completions=COMPLETIONS, **cols) == [1, 1, 0, 0, 1, 1, 0, 0]
    assert format_reward(completions=COMPLETIONS, **cols) == [1, 1, 1, 0, 1, 1, 1, 0]


def test_build_reward_funcs_weights_and_errors():
    funcs, w = build_reward_funcs(RewardConfig(components={"format": 0.2, "rough": 0.0, "meta": 1.0}))
    assert [f.__name__ for f in funcs] == ["format_reward", "rough_reward", "meta"] and w == [0.2, 0.0, 1.0]
    with pytest.raises(ValueError, match="unknown reward component 'polarity'"):
        build_reward_funcs(RewardConfig(components={"polarity": 1.0}))
    with pytest.raises(ValueError, match="unknown meta judge"):
        MetaReward(judge="oracle")
    with pytest.raises(KeyError, match="gold_verdict"):
        rough_reward(completions=COMPLETIONS[:1])


class FlakyVerifier:
    """A meta-verifier whose calls fail for the given indices (grade None, like a failed request)."""

    def __init__(self, fail: set[int]):
        self.fail = fail

    async def agrade_batch(self, pairs):
        return [MetaVerification(ParseStatus.REQUEST_FAILED, detail="HTTP 503") if i in self.fail
                else MetaVerification(ParseStatus.OK, MetaGrade.POOR_MATCH) for i in range(len(pairs))]


def test_failed_judge_calls_are_none_counted_and_stop_training_above_threshold():
    cols = _columns(_trajs(), 4)
    lg = Logger()
    r = MetaReward(verifier=FlakyVerifier({0}), max_failed_fraction=0.5)
    out = asyncio.run(r(completions=COMPLETIONS, log_metric=lg.log_metric, log_extra=lg.log_extra, **cols))
    assert out[0] is None and out[1] == 0.25 and out[3] == 0.0  # failure -> None (NaN in TRL), never a zero
    assert r.last.n_failed == 1 and r.total.n_failed == 1
    assert lg.metrics["meta/judge_failures"] == [1]
    r = MetaReward(verifier=FlakyVerifier({0, 1, 2, 3}), max_failed_fraction=0.5)
    with pytest.raises(JudgeFailureError, match="4 of 6 meta-verifier calls failed.*HTTP 503"):
        asyncio.run(r(completions=COMPLETIONS, **cols))


def test_llm_meta_reward_all_calls_in_flight(endpoint):
    """The LLM meta reward on the session vLLM server, grades forced into the B.3 format."""
    ep = dataclasses.replace(endpoint, extra_body={"structured_outputs": {"regex": GRADE_REGEX}})
    cols = _columns(_trajs(), 4)
    lg = Logger()
    r = MetaReward(judge="llm", endpoint=ep, judge_max_tokens=48)
    out = asyncio.run(r(completions=COMPLETIONS, log_metric=lg.log_metric, log_extra=lg.log_extra, **cols))
    assert r.last.n_judged == 6 and r.last.n_failed == 0
    assert out[3] == 0.0 and out[7] == 0.0  # format gate: no judge call
    assert all(v in (0.0, 0.25, 0.5, 1.0) for v in out)
    assert sum(r.last.grades.values()) == 6
    assert set(lg.extra["meta_grade"]) <= {g.value for g in MetaGrade} | {"UNPARSEABLE"}
    assert r.verifier.engine.stats["requests"] == 6


def test_llm_meta_reward_wrong_key_fails_loudly(endpoint):
    bad = dataclasses.replace(endpoint, api_key="wrong-key", max_retries=0)
    r = MetaReward(judge="llm", endpoint=bad, judge_max_tokens=8, max_failed_fraction=0.25)
    t0 = time.monotonic()
    with pytest.raises(JudgeFailureError, match="6 of 6 meta-verifier calls failed"):
        asyncio.run(r(completions=COMPLETIONS, **_columns(_trajs(), 4)))
    assert time.monotonic() - t0 < 60
    r = MetaReward(judge="llm", endpoint=bad, judge_max_tokens=8, max_failed_fraction=1.0)
    out = asyncio.run(r(completions=COMPLETIONS, **_columns(_trajs(), 4)))
    assert [o is None for o in out] == [True, True, True, False, True, True, True, False]


def test_trajectory_column_roundtrip():
    cols = _columns(_trajs(), 1)
    t = ProofTrajectory.from_dict(json.loads(cols["trajectory"][0]))
    assert t.annotation.first_fatal_error_step == 1


def test_rough_rl_meta_weight_zero_does_not_abort_on_judge_failures():
    """rough_rl logs the meta grade with weight 0: a failing LLM meta-verifier must not stop training."""
    from training.config import GRPORunConfig
    from verifier.config import compose
    from verifier.config import EndpointConfig

    cfg = compose("grpo", GRPORunConfig, ["experiment=rough_rl", "reward.meta.kind=llm"]).reward
    assert cfg.components == {"rough": 1.0, "meta": 0.0}
    # a real failure: nothing listens on port 9
    cfg = dataclasses.replace(cfg, meta=dataclasses.replace(cfg.meta, endpoint=EndpointConfig(
        base_url="http://127.0.0.1:9/v1", model="m", api_key="k", max_retries=0, timeout_s=10.0)))
    funcs, weights = build_reward_funcs(cfg)
    meta = funcs[weights.index(0.0)]
    out = asyncio.run(meta(completions=COMPLETIONS, **_columns(_trajs(), 4)))
    assert [o is None for o in out] == [True, True, True, False, True, True, True, False]
    assert meta.last.n_failed == 6
    # an optimised meta component still stops training
    funcs, weights = build_reward_funcs(dataclasses.replace(cfg, components={"rough": 0.0, "meta": 1.0}))
    with pytest.raises(JudgeFailureError):
        asyncio.run(funcs[1](completions=COMPLETIONS, **_columns(_trajs(), 4)))


def test_a_completion_gets_the_same_status_in_the_reward_and_in_verifierbench(tiny_model):
    """Issue 23 item 2: a completion cut at max_completion_length (no EOS) is ``truncated`` in the GRPO
    reward exactly as in VerifierBench's pass (``verifier.judging``), whatever its text holds; with its
    EOS it parses and is paid. One function (``parse_completion``) decides both."""
    from transformers import AutoTokenizer

    from training.rewards import CompletionReader, parse_completions
    from verifier.engine import Completion
    from verifier.runner import _to_output

    tok = AutoTokenizer.from_pretrained(tiny_model)
    reader = CompletionReader.for_tokenizer(tok)
    text = format_verification("invalid", 1, "Step 1: 5 + 4 = 9.")  # a complete, parseable answer
    ids = tok(text, add_special_tokens=False)["input_ids"]
    cut = dataclasses.replace(reader, max_completion_length=len(ids))  # the budget ran out right after the text
    eos = reader.eos_token_ids[0]
    trajs = _trajs()[:1]
    cols = _columns(trajs, 2)
    logged: dict[str, list[float]] = {}
    cols["log_metric"] = lambda k, v: logged.setdefault(k, []).append(v)
    for finish, tokens in (("length", ids), ("stop", [*ids, eos])):
        bench = _to_output(Completion(text=text, finish_reason=finish), n_steps=3)  # VerifierBench's pass
        train = parse_completions([_c(text)], [3], {"reader": cut, "completion_ids": [tokens]})[0]
        assert train.status is bench.status, (finish, train.status, bench.status)
    assert bench.status is ParseStatus.OK and train.status is ParseStatus.OK
    # every reward component: the cut completion earns nothing, the finished one is paid; counted and logged
    funcs, _ = build_reward_funcs(RewardConfig(components={"format": 0.5, "rough": 1.0, "meta": 1.0}), cut)
    kw = dict(cols, completion_ids=[ids, [*ids, eos]])
    fmt, rough, meta = funcs
    assert fmt(completions=[_c(text)] * 2, **kw) == [0.0, 1.0]
    assert rough(completions=[_c(text)] * 2, **kw) == [0.0, 1.0]
    assert asyncio.run(meta(completions=[_c(text)] * 2, **kw)) == [0.0, 1.0]
    assert meta.last.n_truncated == 1 and meta.total.n_truncated == 1
    assert logged["completions/truncated_frac"][-1] == 0.5
    with pytest.raises(ValueError, match="eos_token_id"):
        CompletionReader.for_tokenizer(object())
