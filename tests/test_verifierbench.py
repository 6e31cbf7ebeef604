"""VerifierBench end to end on the session vLLM server (tiny model, guided decoding, max_tokens <= 64)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verifier.formats import load_processbench
from eval.verifierbench import VerifierBenchConfig, run
from verifier.config import compose
from verifier.io import read_jsonl, write_jsonl
from verifier.judging import synthetic_verdict_regex

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[1]
GRADE_REGEX = r"<final_answer>\ngrade: (EXACT_MATCH|BASIC_MATCH|POOR_MATCH|WRONG_POLARITY)\n</final_answer>"


@pytest.fixture(scope="module")
def gold(shared_data, tmp_path_factory):
    # at least 3 steps: the guided verifier names a first error step in 0..2
    recs = [r for r in load_processbench(shared_data / "processbench" / "gsm8k.json") if len(r.proof_steps) >= 3]
    # a handful with both polarities, two proofs per problem (clustered CIs)
    valid = [r for r in recs if r.annotation.is_valid][:3]
    invalid = [r for r in recs if not r.annotation.is_valid and r.annotation.first_fatal_error_step <= 2][:3]
    rows = []
    for i, r in enumerate(valid + invalid):
        d = r.to_dict()
        d["problem_id"] = f"prob{i // 2}"
        d["split"] = "UG" if i % 2 else "QE"
        rows.append(d)
    path = tmp_path_factory.mktemp("vb") / "gold.jsonl"
    write_jsonl(path, rows)
    return path


def _overrides(endpoint, gold, out, *extra):
    return [f"data={gold}", f"out={out}", f"verifier.base_url={endpoint.base_url}", f"verifier.api_key={endpoint.api_key}",
            f"verifier.model={endpoint.model}", "verifier.max_retries=1", "judge.n=3", "judge.max_tokens=64",
            "judge.run_seed=1", "bootstrap_n=100", "progress=false", *extra]


def _cfg(endpoint, gold, out, *extra, regex=True):
    cfg = compose("verifierbench", VerifierBenchConfig, _overrides(endpoint, gold, out, *extra))
    if regex:
        cfg.verifier.extra_body = {"structured_outputs": {"regex": synthetic_verdict_regex(60)}}
    return cfg


def test_verifierbench_rule_meta_end_to_end(endpoint, gold, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "run"
    doc = run(_cfg(endpoint, gold, out))
    rows = read_jsonl(out / "judgments.jsonl")
    assert len(rows) == 6 and len({r["id"] for r in rows}) == 6
    for r in rows:
        assert len(r["passes"]) == 3 and all(p["parse_status"] == "ok" for p in r["passes"])
        assert r["meta_grade"] in ("EXACT_MATCH", "BASIC_MATCH", "POOR_MATCH", "WRONG_POLARITY")
        rep = r["passes"][r["meta_pass"]]
        assert rep["verdict"] == r["verdict"]  # the graded verification carries the decision
        # pessimism: accepted only if all passes accept
        assert (r["verdict"] == "valid") == all(p["verdict"] == "valid" for p in r["passes"])
    # metrics.json agrees with an independent count over the rows
    gold_rows = {json.loads(line)["id"]: json.loads(line) for line in gold.read_text().splitlines()}
    pos = [r for r in rows if gold_rows[r["id"]]["annotation"]["first_fatal_error_step"] == -1]
    tp = sum(r["verdict"] == "valid" for r in pos)
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["rough.tpr"]["counts"] == {"tp": tp, "pos": len(pos)}
    assert saved["rough.tpr"]["value"] == pytest.approx(tp / len(pos))
    for k in ("rough.tnr", "rough.balanced_f1", "meta.tpr", "meta.tnr", "meta.balanced_f1", "processbench.f1"):
        assert k in saved
    assert doc["counts"]["problems"] == 3 and doc["run"]["judged"] == 6
    assert [r["k"] for r in doc["k_curve"]] == [1, 2, 3, 3]
    md = (out / "report.md").read_text()
    assert "![k-curve](k_curve.png)" in md and (out / "tpr_tnr.png").exists()
    assert list((out / "wandb").glob("offline-run-*"))
    assert "test-key" not in (out / "config.json").read_text()  # no secrets written
    # a re-run finds everything done and reproduces the metrics
    doc2 = run(_cfg(endpoint, gold, out, "wandb.enabled=false"))
    assert doc2["run"]["already_done"] == 6 and doc2["run"]["judged"] == 0
    assert doc2["rough.balanced_f1"] == doc["rough.balanced_f1"]


def test_verifierbench_llm_meta_verifier(endpoint, gold, tmp_path):
    """The B.3 meta-verification prompt on its own endpoint (here the same server, guided to a grade)."""
    out = tmp_path / "run"
    cfg = _cfg(endpoint, gold, out, "meta.kind=llm", f"meta.endpoint.base_url={endpoint.base_url}",
               f"meta.endpoint.api_key={endpoint.api_key}", f"meta.endpoint.model={endpoint.model}",
               "meta.max_tokens=64", "wandb.enabled=false", "limit=4")
    cfg.meta.endpoint.extra_body = {"structured_outputs": {"regex": GRADE_REGEX}}
    doc = run(cfg)
    rows = read_jsonl(out / "judgments.jsonl")
    assert len(rows) == 4
    assert all(r["meta_status"] == "ok" and r["meta_grade"] for r in rows), [(r["meta_status"], r["meta_detail"]) for r in rows]
    assert doc["counts"]["meta_ungraded"] == 0
    assert sum(doc["counts"]["meta_grades"].values()) == 4
    # an unguided random model gives unparseable grades: counted, never silently zero
    cfg.meta.endpoint.extra_body = {}
    cfg.out = str(tmp_path / "run2")
    doc = run(cfg)
    rows = read_jsonl(tmp_path / "run2" / "judgments.jsonl")
    assert len(rows) == 4 and all(r["meta_grade"] is None for r in rows)  # 64 random tokens never reach a grade
    assert all(r["meta_status"] in ("truncated", "no_answer_block") and r["meta_detail"] for r in rows)
    assert doc["counts"]["meta_ungraded"] == 4 and doc["run"]["meta_failed"] == 4
    assert sum(doc["counts"]["meta_grades"].values()) == 0
    first = {r["id"]: r["passes"] for r in rows}
    # issue 14.4: a resume re-grades the null grades (guided now) instead of keeping them as failures;
    # the verifier's passes are kept (no pass is generated again), each id is still in the file once
    cfg.meta.endpoint.extra_body = {"structured_outputs": {"regex": GRADE_REGEX}}
    doc = run(cfg)
    rows = read_jsonl(tmp_path / "run2" / "judgments.jsonl")
    assert sorted(r["id"] for r in rows) == sorted(first)
    assert all(r["meta_status"] == "ok" and r["meta_grade"] for r in rows)
    assert {r["id"]: r["passes"] for r in rows} == first
    assert doc["run"]["meta_regraded"] == 4 and doc["run"]["meta_failed"] == 0 and doc["run"]["judged"] == 0
    assert doc["run"]["generated_passes"] == 0
    assert doc["counts"]["meta_ungraded"] == 0 and sum(doc["counts"]["meta_grades"].values()) == 4


@pytest.mark.slow
def test_verifierbench_resumes_after_kill(endpoint, gold, tmp_path):
    """Kill the command half-way (SIGKILL), re-run it: every id exactly once, same decisions as a clean run."""
    out = tmp_path / "killed"
    args = _overrides(endpoint, gold, out, "judge.max_concurrency=1", "wandb.enabled=false",
                      "+verifier.extra_body.structured_outputs.regex='" + synthetic_verdict_regex(60)
                      .replace("\n", "\\n") + "'")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "eval.verifierbench", *args]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    path = out / "judgments.jsonl"
    t0 = time.time()
    while time.time() - t0 < 120:
        if path.exists() and len(path.read_text().splitlines()) >= 2:
            break
        if proc.poll() is not None:
            pytest.fail(f"finished before it could be killed: {proc.stdout.read()}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_before = len([line for line in path.read_text().splitlines() if line.strip()])
    assert 1 <= n_before < 6
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].startswith("wrote ")
    rows = read_jsonl(path)
    assert sorted(r["id"] for r in rows) == sorted({r["id"] for r in rows}) and len(rows) == 6
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["run"]["already_done"] >= n_before
    # the same run uninterrupted gives the same decisions (seeded passes)
    clean = run(_cfg(endpoint, gold, tmp_path / "clean", "wandb.enabled=false"))
    ref = {r["id"]: (r["verdict"], [q["text"] for q in r["passes"]]) for r in read_jsonl(tmp_path / "clean" /
                                                                                            "judgments.jsonl")}
    assert {r["id"]: (r["verdict"], [q["text"] for q in r["passes"]]) for r in rows} == ref
    assert clean["rough.balanced_f1"] == doc["rough.balanced_f1"]


def test_bad_config_and_unannotated_data(endpoint, tmp_path):
    gold = tmp_path / "g.jsonl"
    write_jsonl(gold, [{"id": "a", "problem_id": "p", "problem": "P", "proof_steps": ["x"]}])
    with pytest.raises(Exception, match="record 'a', field 'annotation'"):
        run(_cfg(endpoint, gold, tmp_path / "o", regex=False))
    cfg = dataclasses.replace(_cfg(endpoint, gold, tmp_path / "o", regex=False))
    cfg.meta.kind = "oracle"
    from eval.verifierbench import make_meta_verifier

    with pytest.raises(ValueError, match="meta.kind must be rule or llm"):
        make_meta_verifier(cfg.meta)


def test_engine_choice_is_checked_before_any_judging(gold, tmp_path):
    """engine=offline needs a model directory (e.g. a training run's DIR/final); errors name the key."""
    base = [f"data={gold}", f"out={tmp_path / 'o'}", "wandb.enabled=false", "progress=false"]
    cfg = compose("verifierbench", VerifierBenchConfig, [*base, "engine=offline", f"offline.model={tmp_path / 'nope'}"])
    with pytest.raises(FileNotFoundError, match="offline.model=.*not a model directory"):
        run(cfg)
    cfg = compose("verifierbench", VerifierBenchConfig, [*base, "engine=vllm"])
    with pytest.raises(ValueError, match="engine must be endpoint or offline"):
        run(cfg)
    assert not (tmp_path / "o" / "judgments.jsonl").exists()
