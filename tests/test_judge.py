"""Batch judging on the real vLLM server (section 4.4): early stop equals the full run, cache, too_long, failures."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import free_port

from verifier.formats import load_processbench
from verifier.config import EndpointConfig
from verifier.engine import OpenAIEngine
from verifier.judging import JudgeConfig, PassCache, synthetic_verdict_regex
from verifier.judgment import Judgment
from verifier.records import ParseStatus, ProofTrajectory, Verdict
from verifier.runner import judge_trajectories

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def trajs(shared_data):
    return load_processbench(shared_data / "processbench" / "gsm8k.json")[:12]


def guided(endpoint: EndpointConfig, accept_percent: int = 90) -> OpenAIEngine:
    """The tiny model forced by guided decoding into parseable verdicts with a set accept rate."""
    cfg = dataclasses.replace(endpoint, extra_body={"structured_outputs": {"regex": synthetic_verdict_regex(accept_percent)}})
    return OpenAIEngine(cfg)


JCFG = JudgeConfig(n=8, max_tokens=64, run_seed=3)


def _decisions(j):
    """A judgment's row without token counts (the server reports usage per request, not per sample)."""
    row = j.to_row()
    for p in row["passes"]:
        p.pop("completion_tokens")
    return row


def test_early_stop_equals_full_run(endpoint, trajs):
    full = judge_trajectories(trajs, guided(endpoint), JCFG)
    early_engine = guided(endpoint)
    early = judge_trajectories(trajs, early_engine, dataclasses.replace(JCFG, early_stop=True))
    assert all(j.status == "ok" and j.aggregate.n_unparseable == 0 for j in full)
    verdicts = [j.verdict for j in full]
    assert Verdict.VALID in verdicts and Verdict.INVALID in verdicts  # a mixed set, so the test can fail
    assert [j.verdict for j in early] == verdicts
    for f, e in zip(full, early):
        assert len(f.passes) == 8
        assert [p.raw_text for p in e.passes] == [p.raw_text for p in f.passes[: len(e.passes)]]
        assert e.seeds == f.seeds[: len(e.seeds)]
        if e.verdict is Verdict.INVALID:  # stopped in the wave of its first rejecting pass
            last_wave_start = {1: 0, 2: 1, 4: 2, 8: 4}[len(e.passes)]
            assert all(p.accepts for p in e.passes[:last_wave_start])
            assert not all(p.accepts for p in e.passes[last_wave_start:])
        else:
            assert len(e.passes) == 8
    assert sum(j.tokens for j in early) < sum(j.tokens for j in full)
    assert any(j.early_stopped for j in early)
    # waves: one request per wave per proof (n=m, seed=base+k), never one per pass
    assert early_engine.stats["requests"] == sum({1: 1, 2: 2, 4: 3, 8: 4}[len(j.passes)] for j in early)


def test_k_of_n_and_majority_early_stop_match(endpoint, trajs):
    for policy, k in (("k_of_n", 3), ("majority", None)):
        cfg = dataclasses.replace(JCFG, n=4, policy=policy, k=k)
        full = judge_trajectories(trajs[:6], guided(endpoint, 50), cfg)
        early = judge_trajectories(trajs[:6], guided(endpoint, 50), dataclasses.replace(cfg, early_stop=True))
        assert [j.verdict for j in early] == [j.verdict for j in full]


def test_cache_serves_repeats_and_partial_runs(endpoint, trajs, tmp_path):
    cache = PassCache(tmp_path / "cache.sqlite")
    ref = judge_trajectories(trajs[:6], guided(endpoint), JCFG)
    # an early-stop run fills part of the cache; the full run then generates only the missing passes
    e1 = guided(endpoint)
    early = judge_trajectories(trajs[:6], e1, dataclasses.replace(JCFG, early_stop=True), cache=cache)
    cached_passes = sum(len(j.passes) for j in early)
    assert len(cache) == cached_passes
    e2 = guided(endpoint)
    full = judge_trajectories(trajs[:6], e2, JCFG, cache=cache)
    assert [_decisions(j) for j in full] == [_decisions(j) for j in ref]
    assert sum(j.cached_passes for j in full) == cached_passes
    assert len(cache) == 6 * 8
    e3 = guided(endpoint)
    again = judge_trajectories(trajs[:6], e3, JCFG, cache=cache)
    assert e3.stats["requests"] == 0 and [j.verdict for j in again] == [j.verdict for j in ref]
    # another model / other guided decoding / other sampling -> other keys
    other = judge_trajectories(trajs[:2], guided(endpoint, 10), dataclasses.replace(JCFG, n=1), cache=cache)
    assert all(j.cached_passes == 0 for j in other)


def test_unparseable_passes_are_counted_and_reject(endpoint, trajs):
    """Random weights without guided decoding: every pass fails to parse, and says why."""
    [j] = judge_trajectories(trajs[:1], OpenAIEngine(endpoint), dataclasses.replace(JCFG, n=4, max_tokens=16))
    assert j.aggregate.n_unparseable == 4 and j.verdict is Verdict.INVALID and j.status == "ok"
    assert all(p.status in (ParseStatus.TRUNCATED, ParseStatus.NO_ANSWER_BLOCK) and p.detail for p in j.passes)
    assert {p.status for p in j.passes} == {ParseStatus.TRUNCATED}  # 16 tokens never reach the block
    ignored = judge_trajectories(trajs[:1], OpenAIEngine(endpoint),
                                 dataclasses.replace(JCFG, n=4, max_tokens=16, unparseable="ignore"))[0]
    assert ignored.aggregate.n_unparseable == 4 and ignored.aggregate.n_reject == 0


def test_too_long_is_explicit_and_does_not_stop_the_batch(endpoint, trajs):
    long = ProofTrajectory(id="huge", problem_id="huge", problem="Prove it.",
                           proof_steps=tuple("lemma " * 1500 for _ in range(6)))  # > max_model_len 8192
    js = judge_trajectories([long, trajs[0]], guided(endpoint), dataclasses.replace(JCFG, early_stop=True))
    huge, ok = js
    assert huge.status == "too_long" and huge.verdict is Verdict.INVALID
    assert huge.passes and all(p.status is ParseStatus.TOO_LONG for p in huge.passes)
    assert "context" in huge.passes[0].detail
    assert ok.status == "ok" and ok.passes[0].ok
    row = huge.to_row()
    assert row["status"] == "too_long" and row["passes"][0]["parse_status"] == "too_long"


def test_failed_requests_make_incomplete_judgments(trajs):
    dead = EndpointConfig(base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="x", model="m",
                          max_retries=1, timeout_s=5)
    [j] = judge_trajectories(trajs[:1], OpenAIEngine(dead), JCFG)
    assert j.status == "request_failed" and not j.complete
    assert j.passes[0].status is ParseStatus.REQUEST_FAILED


def test_row_roundtrip(endpoint, trajs):
    js = judge_trajectories(trajs[:3], guided(endpoint, 50), dataclasses.replace(JCFG, n=3))
    for j in js:
        row = j.to_row()
        assert set(row) >= {"id", "verdict", "first_error_step", "accept_fraction", "passes"}
        assert len(row["passes"]) == 3
        for p in row["passes"]:
            assert set(p) >= {"index", "verdict", "first_error_step", "parse_status", "text", "seed"}, p
        assert [p["index"] for p in row["passes"]] == [0, 1, 2]
        assert [p["seed"] for p in row["passes"]] == j.seeds and len(set(j.seeds)) == 3
        back = Judgment.from_row(row)
        assert back.to_row() == row


def test_duplicate_ids_rejected(endpoint, trajs):
    with pytest.raises(ValueError, match="duplicate id"):
        judge_trajectories([trajs[0], trajs[0]], OpenAIEngine(endpoint), JCFG)
