"""The front of the pipeline on the real vLLM server (tiny model): curate (with the LLM classifier) ->
candidates (two generators, k proofs, one round of iterative revision) -> uncertainty selection ->
Label Studio tasks; and candidates resumed after a kill half-way (sections 3.1, 4.1)."""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from data_pipeline.candidates import CandidatesConfig, CriticConfig
from data_pipeline.candidates import run as run_candidates
from data_pipeline.curate import ClassifierConfig, CurateConfig
from data_pipeline.curate import run as run_curate
from verifier.identity import version_id
from verifier.io import load_trajectories, read_jsonl, write_jsonl

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[1]
# guided decoding makes the random tiny model write well-formed outputs (what is tested is the plumbing)
PROOF_REGEX = r"Step 0: [a-z]{2,8} [a-z]{2,8}\nStep 1: [a-z]{2,8}\nStep 2: [a-z]{2,8}"
CLASSIFY_REGEX = ("(" + "|".join(f"{i:02d}" for i in range(80)) + r") <final_answer>\ntask_type: proof\n</final_answer>|"
                  "(" + "|".join(f"{i:02d}" for i in range(80, 100)) +
                  r") <final_answer>\ntask_type: multiple_choice\n</final_answer>")

PROBLEMS = [
    {"id": "sqrt2", "problem": "Prove that the square root of 2 is irrational.", "subject": "number theory"},
    {"id": "primes", "problem": "Prove that there are infinitely many prime numbers."},
    {"id": "pgroup", "problem": "Let G be a group of order p^2 for a prime p. Show that G is abelian."},
    {"id": "unif", "problem": "Show that a continuous function on [0, 1] is uniformly continuous."},
    {"id": "mc", "problem": "Which of the following is irrational? (A) 1/2 (B) sqrt(2) (C) 3 (D) 0.25"},
    {"id": "primes-dup", "problem": "Prove that there are infinitely many prime numbers!"},
]


def guided(endpoint, regex, **kw):
    return dataclasses.replace(endpoint, extra_body={"structured_outputs": {"regex": regex}}, **kw)


def test_curate_candidates_selection_export(endpoint, tmp_path):
    from conftest import LORA_NAME

    from data_pipeline.annotate import AnnotateConfig, export
    from data_pipeline.selection import SelectConfig
    from verifier.judging import JudgeConfig
    from data_pipeline.selection import run as run_select
    from verifier.judging import synthetic_verdict_regex

    write_jsonl(tmp_path / "problems.jsonl", PROBLEMS)
    # 1. curation: rules + duplicates, then the LLM classifier on the engine layer
    cur = run_curate(CurateConfig(input=str(tmp_path / "problems.jsonl"), out=str(tmp_path / "cur"), progress=False,
                                  classifier=ClassifierConfig(enabled=True, endpoint=guided(endpoint, CLASSIFY_REGEX),
                                                              temperature=1.0, max_tokens=40)))
    removed = {r["id"]: r for r in read_jsonl(tmp_path / "cur" / "removed.jsonl")}
    assert removed["mc"]["reason"] == "answer_centric:multiple_choice" and removed["primes-dup"]["reason"] == "duplicate"
    assert cur["classifier"]["status"] == {"ok": 4}  # the four survivors were classified, all parsed
    kept = [r["id"] for r in read_jsonl(tmp_path / "cur" / "problems.jsonl")]
    by_classifier = [i for i, r in removed.items() if r["classifier_status"] == "ok"]
    assert all(removed[i]["reason"] == "answer_centric:multiple_choice" for i in by_classifier)
    assert len(kept) + len(by_classifier) == 4 and len(kept) >= 2, (kept, by_classifier)

    # 2. candidates: two generators (the model and its LoRA adapter), k=2, one revision round, self critique
    gens = [guided(endpoint, PROOF_REGEX), guided(endpoint, PROOF_REGEX, model=LORA_NAME)]
    cfg = CandidatesConfig(problems=str(tmp_path / "cur" / "problems.jsonl"), out=str(tmp_path / "cand"),
                           generators=gens, k=2, rounds=1, critic="self", max_tokens=40, progress=False,
                           critique=CriticConfig(n=1, max_tokens=64, extra_body={
                               "structured_outputs": {"regex": synthetic_verdict_regex(50)}}))
    s = run_candidates(cfg)
    cands = load_trajectories(tmp_path / "cand" / "candidates.jsonl").records  # validated ProofTrajectory records
    assert all(t.annotation is None and len(t.proof_steps) == 3 for t in cands)
    r0 = [t for t in cands if t.meta["candidate"]["round"] == 0]
    r1 = [t for t in cands if t.meta["candidate"]["round"] == 1]
    assert len(r0) == len(kept) * 2 * 2 and s["by_round"]["0"] == len(r0)
    assert Counter(t.generator for t in r0) == {endpoint.model: 2 * len(kept), LORA_NAME: 2 * len(kept)}
    skipped = read_jsonl(tmp_path / "cand" / "skipped.jsonl")
    assert Counter(r["reason"] for r in skipped) == Counter({"accepted_by_critic": len(r0) - len(r1)})
    assert r1 and skipped, "with a 50% critic accept rate both outcomes occur"
    ids = {t.id: t for t in cands}
    for t in r1:  # provenance: parent in round 0, same problem, generator and sample; the critique that led here
        c = t.meta["candidate"]
        parent = ids[c["parent_id"]]
        assert parent.id == version_id(t.problem_id, c["sample"], 0, generator=c["generator_index"])
        assert parent.generator == t.generator and c["critic"] == "self"
        assert c["critique"]["verdict"] == "invalid" and c["critique"]["model"] == t.generator
    for r in skipped:
        assert r["critique"]["accepted"] and r["parent_id"] in ids
    assert s["missing"] == 0

    # 3. uncertainty selection reads candidates.jsonl as its trajectories
    sel_cfg = SelectConfig(trajectories=str(tmp_path / "cand" / "candidates.jsonl"), out=str(tmp_path / "sel"),
                           endpoint=guided(endpoint, synthetic_verdict_regex(60)),
                           judge=JudgeConfig(n=4, max_tokens=64), budget=5, progress=False, plot=False)
    df = run_select(sel_cfg)
    assert sorted(df["id"]) == sorted(ids) and (df["n_passes"] == 4).all()
    queue = read_jsonl(tmp_path / "sel" / "annotation_queue.jsonl")
    assert 0 < len(queue) <= 5 and all(q["id"] in ids for q in queue)

    # 4. Label Studio tasks for the queue, with the selection's verifier passes as references
    out = export(AnnotateConfig(queue=str(tmp_path / "sel" / "annotation_queue.jsonl"), out=str(tmp_path / "ls")))
    import json

    tasks = json.loads((out / "tasks.json").read_text())
    assert [t["data"]["trajectory_id"] for t in tasks] == [q["id"] for q in queue]
    for t in tasks:
        sources = [a["source"] for a in t["data"]["auxiliary"]]
        assert sources[:2] == ["selection", "flagged steps"] and sum("pass" in x for x in sources) == 4


def test_classifier_failures_are_counted_not_guessed(endpoint, tmp_path):
    """The unguided random model never writes the answer block: explicit statuses, on_failure decides."""
    write_jsonl(tmp_path / "problems.jsonl", PROBLEMS[:3])
    base = {"input": str(tmp_path / "problems.jsonl"), "progress": False, "plot": False}
    s = run_curate(CurateConfig(out=str(tmp_path / "keep"), **base,
                                classifier=ClassifierConfig(enabled=True, endpoint=endpoint, max_tokens=8)))
    assert s["kept"] == 3 and s["classifier"]["kept_after_failure"] == 3
    assert set(s["classifier"]["status"]) <= {"no_answer_block", "truncated", "empty"} and sum(
        s["classifier"]["status"].values()) == 3
    s = run_curate(CurateConfig(out=str(tmp_path / "remove"), **base, classifier=ClassifierConfig(
        enabled=True, endpoint=endpoint, max_tokens=8, on_failure="remove")))
    assert s["kept"] == 0 and s["removed_by_reason"] == {"classifier_failed": 3}
    with pytest.raises(RuntimeError, match="3 classification\\(s\\) failed, e.g. record 'sqrt2'"):
        run_curate(CurateConfig(out=str(tmp_path / "err"), **base, classifier=ClassifierConfig(
            enabled=True, endpoint=endpoint, max_tokens=8, on_failure="error")))


def test_candidates_resume_after_kill_half_way(endpoint, tmp_path):
    from verifier.judging import synthetic_verdict_regex

    write_jsonl(tmp_path / "problems.jsonl", PROBLEMS[:3])
    out = tmp_path / "cand"
    cfg = CandidatesConfig(problems=str(tmp_path / "problems.jsonl"), out=str(out),
                           generators=[guided(endpoint, PROOF_REGEX)], k=2, rounds=2, critic="verifier",
                           verifier=guided(endpoint, synthetic_verdict_regex(30)), critique=CriticConfig(n=2, max_tokens=64),
                           max_tokens=40, batch_size=1, progress=False)
    (tmp_path / "cfg.pkl").write_bytes(pickle.dumps(cfg))
    script = tmp_path / "job.py"
    script.write_text(f"import sys, pickle\nsys.path.insert(0, {str(REPO)!r})\nfrom data_pipeline.candidates import run\n"
                      f"run(pickle.load(open({str(tmp_path / 'cfg.pkl')!r}, 'rb')))\n")
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    path = out / "candidates.jsonl"
    lines, deadline = 0, time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            lines = len(path.read_text().splitlines()) if path.exists() else 0
            if lines >= 4:
                break
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert lines >= 4, proc.stderr.read().decode()[-2000:]
    def complete(p):
        return "".join(x for x in p.read_text().splitlines(keepends=True) if x.endswith("\n")) if p.exists() else ""

    before, skipped_before = complete(path), complete(out / "skipped.jsonl")
    s = run_candidates(cfg)
    n_before = len(before.splitlines()) + len(skipped_before.splitlines())
    assert s["resumed_done"] == n_before  # every row written before the kill is kept and not redone
    assert n_before < s["candidates_total"] + len(read_jsonl(out / "skipped.jsonl")), \
        "the job finished before it was killed; nothing to resume"
    assert path.read_text().startswith(before)
    rows = read_jsonl(path)
    ids = [r["id"] for r in rows]
    skipped = {r["id"]: r for r in read_jsonl(out / "skipped.jsonl")}
    assert len(ids) == len(set(ids)) and not set(ids) & set(skipped)  # nothing produced twice
    assert s["missing"] == 0
    for p in PROBLEMS[:3]:  # every chain is complete: each version is revised or stopped, up to round 2
        for k in range(2):
            assert version_id(p["id"], k, 0) in ids
            for rnd in (1, 2):
                vid, parent = version_id(p["id"], k, rnd), version_id(p["id"], k, rnd - 1)
                if parent in ids:
                    assert (vid in ids) != (vid in skipped)
                else:
                    assert vid not in ids and vid not in skipped
    # a third run has nothing left to do
    s3 = run_candidates(cfg)
    assert s3["this_run"] == {} and s3["candidates_total"] == len(ids)


def test_candidates_cli(endpoint, tmp_path):
    write_jsonl(tmp_path / "problems.jsonl", PROBLEMS[:2])
    env = {**os.environ, "VERIFIER_API_KEY": endpoint.resolved_api_key()}
    r = subprocess.run([sys.executable, "-m", "data_pipeline.candidates", f"problems={tmp_path / 'problems.jsonl'}",
                        f"out={tmp_path / 'cli'}",
                        f"generators=[{{base_url: '{endpoint.base_url}', model: '{endpoint.model}'}}]",
                        "k=1", "max_tokens=16", "progress=false"],
                       cwd=REPO, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("candidates: ") and "missing 0" in last, last
    rows = read_jsonl(tmp_path / "cli" / "candidates.jsonl") + read_jsonl(tmp_path / "cli" / "skipped.jsonl")
    assert sorted(r["id"] for r in rows) == ["primes-g0-s0-r0", "sqrt2-g0-s0-r0"]
