"""``VLLMOfflineEngine`` (real ``vllm.LLM`` on CPU): seeds, too_long, LoRA, and judging through it."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import LORA_NAME

from verifier.formats import load_processbench
from verifier.config import Sampling
from verifier.engine import GenerationRequest, OpenAIEngine
from verifier.judging import JudgeConfig, synthetic_verdict_regex
from verifier.runner import judge_trajectories
from verifier.offline import OfflineConfig, VLLMOfflineEngine
from verifier.records import ParseStatus, Verdict
from verifier.templates import as_messages

pytestmark = pytest.mark.vllm

REGEX = synthetic_verdict_regex(90)


@pytest.fixture(scope="module")
def offline(tiny_model, tiny_lora):
    eng = VLLMOfflineEngine(OfflineConfig(model=str(tiny_model), lora_modules={LORA_NAME: str(tiny_lora)},
                                          max_model_len=4096, kv_cache_memory_bytes="64M"))
    yield eng
    eng.close()


def test_seed_rule_and_reproducibility(offline):
    msgs = as_messages("Step 0: 2+2=4")
    s = Sampling(max_tokens=12)
    [four] = offline.generate([GenerationRequest(msgs, n=4, seed=11)], s)
    [third] = offline.generate([GenerationRequest(msgs, n=1, seed=13)], s)
    assert len(four) == 4 and all(c.status == "ok" and c.completion_tokens > 0 for c in four)
    assert third[0].text == four[2].text  # sample i of seed s uses seed s+i
    assert len({c.text for c in four}) > 1
    [again] = offline.generate([GenerationRequest(msgs, n=4, seed=11)], s)
    assert [c.text for c in again] == [c.text for c in four]


def test_prompts_rendered_like_the_served_endpoint(offline, endpoint):
    """Same chat rendering as the server (token counts agree); the LoRA adapter is selectable by name.

    Sample texts are not compared across engines: the random model's near-uniform logits make
    sampling sensitive to float differences between batch shapes.
    """
    msgs = as_messages("Step 0: 1+1=2\n\nStep 1: so 2 is even")
    s = Sampling(max_tokens=16)
    reqs = [GenerationRequest(msgs, n=3, seed=5), GenerationRequest(msgs, n=3, seed=5, model=LORA_NAME)]
    off = offline.generate(reqs, s)
    [[srv]] = OpenAIEngine(endpoint).generate([GenerationRequest(msgs, n=1, seed=5)], s)
    assert off[0][0].prompt_tokens == srv.prompt_tokens == len(offline.prompt_ids(reqs[0]))
    assert [c.text for c in off[1]] != [c.text for c in off[0]]  # the adapter is applied


def test_too_long_is_explicit_and_the_batch_survives(offline):
    s = Sampling(max_tokens=8)
    long_req = GenerationRequest(as_messages("lemma " * 5000), n=2, seed=1, key="huge")
    res = offline.generate([long_req, GenerationRequest(as_messages("Step 0: ok"), n=1, seed=1)], s)
    assert [c.status for c in res[0]] == ["too_long", "too_long"] and "max_model_len=4096" in res[0][0].error
    assert res[1][0].status == "ok" and res[1][0].text


def test_unknown_adapter_names_the_request(offline):
    with pytest.raises(ValueError, match="'r1'.*'model'"):
        offline.generate([GenerationRequest(as_messages("x"), key="r1", model="nope")], Sampling(max_tokens=4))


def test_judging_on_the_offline_engine_early_stop_equals_full(offline, shared_data):
    trajs = load_processbench(shared_data / "processbench" / "gsm8k.json")[:10]
    guided = VLLMOfflineEngine(dataclasses.replace(offline.cfg, extra_body={"structured_outputs": {"regex": REGEX}}),
                               llm=offline.llm)
    cfg = JudgeConfig(n=8, max_tokens=64, run_seed=3)
    full = judge_trajectories(trajs, guided, cfg)
    batches = guided.stats["batches"]
    assert batches == 1  # every proof's 8 passes in one vllm.LLM batch
    early = judge_trajectories(trajs, guided, dataclasses.replace(cfg, early_stop=True))
    assert guided.stats["batches"] - batches <= 4  # at most one batch per wave
    assert all(j.aggregate.n_unparseable == 0 for j in full)
    assert {j.verdict for j in full} == {Verdict.VALID, Verdict.INVALID}
    assert [j.verdict for j in early] == [j.verdict for j in full]
    for f, e in zip(full, early):
        assert [p.raw_text for p in e.passes] == [p.raw_text for p in f.passes[: len(e.passes)]]
        assert e.completion_tokens == f.completion_tokens[: len(e.completion_tokens)]  # exact per-sample counts
    assert sum(j.tokens for j in early) < sum(j.tokens for j in full)
    assert all(p.status is ParseStatus.OK for j in full for p in j.passes)
