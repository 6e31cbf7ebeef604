"""The refine loop (generate -> verify -> refine) and judge pools in ProverBench (issue 25 items 1, 4).

Real vLLM (the session server): the tiny model writes the proofs; the verifier's verdicts are steered by a
guided-decoding regex (``synthetic_verdict_regex``) so that about half the proofs are rejected and refined.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from eval.proverbench import ProverBenchConfig, accepted_by_round, run
from verifier.config import compose
from verifier.identity import parse_version_id, version_id
from verifier.io import read_jsonl, write_jsonl
from verifier.judging import synthetic_verdict_regex
from verifier.pool import needed, pool_accepts, pool_score

REPO = Path(__file__).resolve().parents[1]


def _problems(tmp_path: Path, n: int = 3) -> Path:
    path = tmp_path / "problems.jsonl"
    write_jsonl(path, [{"id": f"q{i}", "problem": f"Prove that {2 * i} + {2 * i + 2} is even.", "split": s,
                        "subject": "NT", "reference_solution": "Both are even."}
                       for i, s in zip(range(n), ["UG", "QE", "UG", "QE"])])
    return path


def _ep(endpoint, prefix: str, model: str | None = None) -> list[str]:
    return [f"{prefix}.base_url={endpoint.base_url}", f"{prefix}.api_key={endpoint.api_key}",
            f"{prefix}.model={model or endpoint.model}", f"{prefix}.max_retries=1"]


def _regex_override(prefix: str, percent: int) -> str:
    rx = synthetic_verdict_regex(percent, max_step=0).replace("\n", "\\n")
    return f"+{prefix}.extra_body.structured_outputs.regex='{rx}'"


def _args(endpoint, problems: Path, out: Path, *extra: str) -> list[str]:
    return [f"problems={problems}", f"out={out}", *_ep(endpoint, "generator"), *_ep(endpoint, "verifier"),
            "generation.max_tokens=24", "judge.max_tokens=64", "judge.n=2", "judge.run_seed=3", "bootstrap_n=50",
            "progress=false", "wandb.enabled=false", _regex_override("verifier", 50), *extra]


def _chains(rows: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in rows:
        v = parse_version_id(r["id"])
        key = f"{v.problem_id}/{v.sample}"
        out.setdefault(key, []).append(r["id"])
    return out


@pytest.mark.vllm
@pytest.mark.slow
def test_refine_resumes_after_kill_each_version_once(endpoint, tmp_path):
    """SIGKILL in refine round 1; the re-run finishes every (problem, sample, round) exactly once, and the
    result equals a clean run's (same seeds: same proofs, critiques and verdicts)."""
    problems = _problems(tmp_path)
    out = tmp_path / "killed"
    args = _args(endpoint, problems, out, "proofs_per_problem=2", "refine.rounds=2", "chunk_size=1",
                 "judge.max_concurrency=1")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "eval.proverbench", *args]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    proofs, judgments = out / "proofs.jsonl", out / "judgments.jsonl"
    t0 = time.time()
    while time.time() - t0 < 240:  # kill as soon as a round-1 revision is on disk (its judging not yet done)
        if proofs.exists() and "-r1\"" in proofs.read_text():
            break
        if proc.poll() is not None:
            pytest.fail(f"finished before it could be killed: {proc.stdout.read()}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    judged_before = {r["id"] for r in read_jsonl(judgments)}
    assert not any(i.endswith("-r2") for i in judged_before)  # killed mid-run, not after it
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].startswith("wrote ")

    gen_ids = [r["id"] for r in read_jsonl(proofs)]
    judged = read_jsonl(judgments)
    assert len(gen_ids) == len(set(gen_ids)), Counter(gen_ids).most_common(3)  # each version generated once
    assert sorted(r["id"] for r in judged) == sorted(gen_ids)  # ... and judged once
    verdict = {r["id"]: r["verdict"] for r in judged}
    for key, ids in _chains(judged).items():  # a version is revised exactly when it was rejected
        ids = sorted(ids, key=lambda i: parse_version_id(i).round)
        v = parse_version_id(ids[0])
        assert ids == [version_id(v.problem_id, v.sample, r) for r in range(len(ids))]
        assert all(verdict[i] == "invalid" for i in ids[:-1])
        assert verdict[ids[-1]] == "valid" or len(ids) == 3
    rows = {r["id"]: r for r in read_jsonl(proofs)}
    revised = [r for r in rows.values() if r["meta"]["round"] > 0]
    assert revised, "about half the proofs are rejected: some must have been revised"
    for r in revised:  # the revision carries its history: earlier versions, verdicts, the critique sent back
        hist = r["meta"]["history"]
        assert [h["round"] for h in hist] == list(range(r["meta"]["round"]))
        assert r["meta"]["parent_id"] == hist[-1]["id"] and all(h["verdict"] == "invalid" for h in hist)
        assert hist[-1]["critique"]  # the rationale of a rejecting pass ("NN" before the answer block)

    doc = json.loads((out / "metrics.json").read_text())
    by_round = doc["refine"]["by_round"]
    assert [b["round"] for b in by_round] == [0, 1, 2]
    vals = [b["acceptance"]["overall"]["value"] for b in by_round]
    assert vals == sorted(vals) and all(b["acceptance"]["overall"]["counts"]["n"] == 6 for b in by_round)
    assert set(by_round[0]["acceptance"]["split"]) == {"UG", "QE"} and "subject" in by_round[0]["acceptance"]
    assert doc["refine"]["gain"] == pytest.approx(vals[-1] - vals[0])
    assert (out / "refine.png").read_bytes()[:4] == b"\x89PNG"
    assert "## Refine loop (2 rounds)" in (out / "report.md").read_text()
    page = next((out / "browser" / "t").glob("*r1*.html"), None) or next((out / "browser" / "t").glob("*"))
    if revised:
        pages = [f.read_text() for f in (out / "browser" / "t").glob("*.html")]
        assert any('id="history"' in html and "Critique sent back" in html for html in pages)
    assert page.exists()

    clean = run(compose("proverbench", ProverBenchConfig, _args(endpoint, problems, tmp_path / "clean",
                                                                 "proofs_per_problem=2", "refine.rounds=2")))
    assert [b["acceptance"]["overall"]["counts"] for b in clean["refine"]["by_round"]] == \
        [b["acceptance"]["overall"]["counts"] for b in by_round]
    assert sorted(r["id"] for r in read_jsonl(tmp_path / "clean" / "proofs.jsonl")) == sorted(gen_ids)


def test_accepted_by_round_counts_the_latest_judged_version():
    chain = {("p", 0): ["p-g0-s0-r0", "p-g0-s0-r1", "p-g0-s0-r2"], ("q", 0): ["q-g0-s0-r0"],
             ("s", 0): ["s-g0-s0-r0", "s-g0-s0-r1"]}
    d = {"p-g0-s0-r0": False, "p-g0-s0-r1": False, "p-g0-s0-r2": True, "q-g0-s0-r0": False, "s-g0-s0-r0": False,
         "s-g0-s0-r1": None}
    assert accepted_by_round(chain, d, 0) == {("p", 0): False, ("q", 0): False, ("s", 0): False}
    assert accepted_by_round(chain, d, 1) == {("p", 0): False, ("q", 0): False, ("s", 0): None}
    assert accepted_by_round(chain, d, 2)[("p", 0)] is True


@pytest.mark.parametrize(("accepts", "all_", "majority"), [
    ([True], True, True),
    ([False], False, False),
    ([True, True], True, True),
    ([True, False], False, False),  # a tie is not a majority
    ([True, True, False], False, True),
    ([True, False, False], False, False),
    ([True, True, True, False], False, True),
    ([True, True, False, False], False, False),
])
def test_pool_rules(accepts, all_, majority):
    assert pool_accepts(accepts, "all") is all_
    assert pool_accepts(accepts, "majority") is majority
    assert pool_score([float(a) for a in accepts], "all") == float(all_)
    assert pool_score([float(a) for a in accepts], "majority") == float(majority)


def test_pool_rule_errors():
    with pytest.raises(ValueError, match="pool rule"):
        needed(3, "any")
    with pytest.raises(ValueError, match="at least one"):
        needed(0, "all")
    with pytest.raises(ValueError, match="pool.rule"):
        compose("proverbench", ProverBenchConfig, ["problems=x", "out=y", "pool.rule=some"]).validate()


@pytest.mark.vllm
def test_judge_pool_all_and_majority_on_three_served_models(endpoint, tmp_path):
    """Three members (the base model twice with different verdict rates, the LoRA adapter): the pool's
    decision on every proof is the rule applied to the members' own rows, and the report shows each one."""
    from conftest import LORA_NAME as lora_name

    problems = _problems(tmp_path, 4)
    pool = ("+pool.verifiers=[{base_url: " + endpoint.base_url + ", api_key: " + endpoint.api_key + ", model: "
            + lora_name + ", max_retries: 1}, {base_url: " + endpoint.base_url + ", api_key: " + endpoint.api_key
            + ", model: " + endpoint.model + ", max_retries: 1}]")
    for rule in ("all", "majority"):
        out = tmp_path / rule
        cfg = compose("proverbench", ProverBenchConfig, _args(endpoint, problems, out, "proofs_per_problem=2",
                                                              f"pool.rule={rule}", pool.replace("+pool", "pool")))
        cfg.pool.verifiers[0].extra_body = {"structured_outputs": {"regex": synthetic_verdict_regex(80, 0)}}
        cfg.pool.verifiers[1].extra_body = {"structured_outputs": {"regex": synthetic_verdict_regex(30, 0)}}
        doc = run(cfg)
        members = [{r["id"]: r["verdict"] == "valid" for r in read_jsonl(out / name)}
                   for name in ("judgments.jsonl", "judgments.pool1.jsonl", "judgments.pool2.jsonl")]
        assert all(len(m) == 8 for m in members)
        want = [pool_accepts([m[i] for m in members], rule) for i in sorted(members[0])]
        assert doc["acceptance"]["overall"]["counts"] == {"accepted": sum(want), "n": 8}
        assert [m["label"] for m in doc["pool"]["members"]] == [endpoint.model, lora_name, f"{endpoint.model}#2"]
        assert [m["acceptance"]["counts"]["accepted"] for m in doc["pool"]["members"]] == \
            [sum(m.values()) for m in members]
        assert doc["pool"]["rule"] == rule and f"## Judge pool (rule: {rule})" in (out / "report.md").read_text()
        if rule == "all":
            assert sum(want) <= min(sum(m.values()) for m in members)
        saved = json.loads((out / "config.json").read_text())
        assert all(v["api_key"] == "***" for v in saved["pool"]["verifiers"])  # no key in a file
