"""The one judging runner (verifier.runner.judge) on the real vLLM server: resume, post-step, columns, counts."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import free_port

from verifier.formats import load_processbench
from verifier.config import EndpointConfig
from verifier.engine import OpenAIEngine
from verifier.io import read_jsonl
from verifier.judging import JudgeConfig, PassCache, synthetic_verdict_regex
from verifier.records import ProofTrajectory
from verifier.runner import judge

pytestmark = pytest.mark.vllm
CFG = JudgeConfig(n=4, max_tokens=64, run_seed=5)


@pytest.fixture(scope="module")
def trajs(shared_data):
    return load_processbench(shared_data / "processbench" / "gsm8k.json")[:8]


def guided(endpoint: EndpointConfig, accept_percent: int = 60) -> OpenAIEngine:
    return OpenAIEngine(dataclasses.replace(
        endpoint, extra_body={"structured_outputs": {"regex": synthetic_verdict_regex(accept_percent)}}))


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_resume_torn_line_exactly_once_and_counts(endpoint, trajs, tmp_path):
    """A crash leaves 3 rows and a torn 4th: the re-run judges only the other 5, from the cache where it can."""
    out, cache = tmp_path / "j.jsonl", PassCache(tmp_path / "c.sqlite")
    huge = ProofTrajectory(id="huge", problem_id="huge", problem="Prove it.",
                           proof_steps=tuple("lemma " * 1500 for _ in range(6)))
    recs = [*trajs, huge]
    ref = judge(recs, guided(endpoint), CFG, out, cache=cache, columns=lambda t: {"problem_id": t.problem_id})
    s = ref.summary
    assert s["records"] == 9 and s["judged"] == 9 and s["written"] == 9 and s["failed"] == 0
    assert s["status"] == {"ok": 8, "too_long": 1} and s["too_long"] == 1
    n_passes = sum(len(r["passes"]) for r in ref.rows.values())
    assert sum(s["pass_status"].values()) == n_passes and s["pass_status"]["too_long"] == len(ref.rows["huge"]["passes"])
    assert s["generated_passes"] == n_passes and s["cached_passes"] == 0
    rows = _lines(out)
    assert [r["id"] for r in rows] and sorted(r["id"] for r in rows) == sorted(t.id for t in recs)
    assert all(r["problem_id"] and r["template"] == "verify" for r in rows)  # extra columns + recorded prompt
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # killed while writing line 4
    engine = guided(endpoint)
    again = judge(recs, engine, CFG, out, cache=cache, columns=lambda t: {"problem_id": t.problem_id})
    assert again.summary["already_done"] == 3 and again.summary["judged"] == 6
    assert again.summary["generated_passes"] == 0 and again.summary["cached_passes"] > 0  # all from the cache
    assert engine.stats["requests"] == 0
    after = _lines(out)
    assert len(after) == 9 and sorted(r["id"] for r in after) == sorted(t.id for t in recs)  # each record once
    assert {r["id"]: r["passes"] for r in after} == {r["id"]: r["passes"] for r in rows}
    # every record already in the file: nothing judged, nothing appended
    third = judge(recs, guided(endpoint), CFG, out)
    assert third.summary["already_done"] == 9 and third.summary["written"] == 0 and len(_lines(out)) == 9
    cache.close()


def test_post_step_failures_are_kept_counted_and_redone(endpoint, trajs, tmp_path):
    """post(record, row) adds columns; a row whose post failed is a counted failure, re-posted on resume."""
    out = tmp_path / "j.jsonl"
    seen: list[str] = []

    async def flaky(t, row):
        seen.append(t.id)
        ok = int(row["n_accept"]) % 2 == 0 and t.id != trajs[0].id
        return {"grade": (row["n_accept"] if ok else None)}

    def graded(row):
        return row.get("grade") is not None

    first = judge(trajs, guided(endpoint), CFG, out, post=flaky, post_ok=graded)
    bad = [r["id"] for r in first.rows.values() if r["grade"] is None]
    assert bad and first.summary["post_failed"] == len(bad) and first.summary["written"] == len(trajs)
    assert sorted(seen) == sorted(t.id for t in trajs)
    seen.clear()
    engine = guided(endpoint)

    def fixed(t, row):  # a plain (sync) post works too
        seen.append(t.id)
        return {"grade": int(row["n_accept"])}

    second = judge(trajs, engine, CFG, out, post=fixed, post_ok=graded)
    assert sorted(seen) == sorted(bad)  # only the failed ones are re-posted
    assert engine.stats["requests"] == 0  # on the stored passes: nothing generated
    assert second.summary["post_redone"] == len(bad) and second.summary["post_failed"] == 0
    assert second.summary["already_done"] == len(trajs) - len(bad)
    rows = read_jsonl(out)
    assert len(rows) == len(trajs) and len({r["id"] for r in rows}) == len(trajs)
    assert all(r["grade"] == r["n_accept"] for r in rows)
    assert {r["id"]: r["passes"] for r in rows} == {r["id"]: r["passes"] for r in first.rows.values()}


def test_failed_requests_are_not_written(trajs, tmp_path):
    dead = EndpointConfig(base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="x", model="m",
                          max_retries=0, timeout_s=5)
    res = judge(trajs[:2], OpenAIEngine(dead), CFG, tmp_path / "j.jsonl")
    assert res.summary["failed"] == 2 and res.summary["written"] == 0
    assert res.summary["status"] == {"request_failed": 2}
    assert not res.rows and (tmp_path / "j.jsonl").read_text() == ""
    assert all(j is not None and not j.complete for j in res.judgments)
