"""Prover GRPO (issue 25 item 2): the gold checker, the prover reward and its failure handling; thinking provers
(issue 42 item 4): the verifier judges the proof after the reasoning."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from test_proverbench import RecordingEngine

from data_pipeline.synthetic import generate_synthetic
from data_pipeline.synthetic_check import check_proof, gold_proof, proof_text
from training.prover_reward import GoldReward, ProverReward, ProverRLConfig, problem_rows, synthetic_problems
from training.rewards import JudgeFailureError
from verifier.config import EndpointConfig
from verifier.engine import OpenAIEngine
from verifier.judging import synthetic_verdict_regex


def test_gold_checker_agrees_with_the_planted_annotations():
    trajs = generate_synthetic(600, seed=5, ops="+-*", recoverable_rate=0.5)
    for t in trajs:
        assert check_proof(t.problem, t.proof_steps).true == t.annotation.is_valid, (t.id, t.proof_steps)
    for t in trajs[:50]:
        assert check_proof(t.problem, gold_proof(t.problem)).true
    t = trajs[0]
    assert not check_proof(t.problem, gold_proof(t.problem)[:-1]).true  # a step missing
    assert not check_proof("Prove Fermat.", ["Step"]).true
    # free text a prover writes: a wrong result followed by a step that starts from the right value
    assert not check_proof("Compute 5 + 3 - 2.", ["5 + 3 = 9", "8 - 2 = 6", "So the answer is 6."]).true
    assert not check_proof("Compute 5 + 3 - 2.", ["5 + 3 = 8", "8 + 2 = 10", "So the answer is 10."]).true
    assert check_proof("Compute 5 + 3 - 2.", ["5 + 3 == 8", "8 - 2 -> 6", "So the answer is 6."]).true  # slips


def _columns(problems, g):
    rows = problem_rows(problems)
    return {k: [r[k] for r in rows for _ in range(g)] for k in ("problem_id", "problem", "reference_solution",
                                                                 "split", "subject")}


def test_gold_reward_scores_true_proofs_and_logs_hacking_free():
    probs = synthetic_problems(3, seed=1)
    completions = [[{"role": "assistant", "content": proof_text(gold_proof(p.problem))}] for p in probs]
    completions[1] = [{"role": "assistant", "content": "Step 0: 1 + 1 = 3\n\nStep 1: So the answer is 3."}]
    logged = {}
    r = GoldReward()
    out = r(completions, **_columns(probs, 1), log_metric=lambda k, v: logged.__setitem__(k, v))
    assert out == [1.0, 0.0, 1.0]
    assert logged["prover/true_rate"] == pytest.approx(2 / 3) and logged["prover/hacking_rate"] == 0.0


class DroppingEngine:
    """The real engine, except that requests of chosen proofs fail (a server dropping them after retries)."""

    def __init__(self, engine, drop):
        self.engine, self.drop, self.model = engine, drop, engine.model

    async def agenerate(self, requests, sampling):
        from verifier.engine import Completion

        keep = [r for r in requests if not any(d in r.key for d in self.drop)]
        got = iter(await self.engine.agenerate(keep, sampling) if keep else [])
        return [[Completion(status="request_failed", error="injected: connection dropped")] * r.n
                if any(d in r.key for d in self.drop) else next(got) for r in requests]

    def generate(self, requests, sampling, progress=False):
        from verifier.engine import run_sync

        return run_sync(self.agenerate(requests, sampling))


def _cfg(endpoint, **kw):
    ep = dataclasses.replace(endpoint, extra_body={"structured_outputs": {"regex": synthetic_verdict_regex(50, 0)}})
    cfg = ProverRLConfig(enabled=True, verifier=ep, **kw)
    cfg.judge = dataclasses.replace(cfg.judge, n=4, max_tokens=64)
    return cfg


@pytest.mark.vllm
def test_prover_reward_policies_failures_and_stop(endpoint):
    probs = synthetic_problems(4, seed=2)
    cols = _columns(probs, 2)
    completions = [[{"role": "assistant", "content": proof_text(gold_proof(p))}] for p in cols["problem"]]
    completions[1] = [{"role": "assistant", "content": "Step 0: 2 + 2 = 5\n\nStep 1: So the answer is 5."}]
    logged = {}
    kw = {**cols, "log_metric": lambda k, v: logged.__setitem__(k, v)}

    pess = ProverReward(_cfg(endpoint, policy="pessimistic"))
    mean = ProverReward(_cfg(endpoint, policy="mean"))
    rp = asyncio.run(pess(completions, **kw))
    rm = asyncio.run(mean(completions, **kw))
    assert all(v in (0.0, 1.0) for v in rp) and all(0.0 <= v <= 1.0 for v in rm)
    assert [v == 1.0 for v in rm] == [v == 1.0 for v in rp]  # same seeds: all 4 passes accept in both
    assert any(0.0 < v < 1.0 for v in rm), "a 50% verifier over 4 passes gives partial scores"
    st = pess.last
    assert st.n == 8 and st.n_failed == 0 and st.n_checked == 8 and st.n_true == 7
    assert st.n_hacked == int(rp[1] == 1.0)  # the one false proof, if the verifier accepted it
    assert logged["prover/true_rate"] == pytest.approx(7 / 8)

    # a failed call is neutral (None) and counted; under the limit the step goes on
    real = OpenAIEngine(pess.cfg.verifier)
    few = ProverReward(_cfg(endpoint, max_failed_fraction=0.25), engines=[DroppingEngine(real, ["/c3"])])
    out = asyncio.run(few(completions, **kw))
    assert out[3] is None and sum(v is None for v in out) == 1 and few.last.n_failed == 1
    assert [v for i, v in enumerate(out) if i != 3] == [v for i, v in enumerate(rp) if i != 3]
    assert logged["prover/judge_failures"] == 1
    # too many failures stop the run with one clear error
    many = ProverReward(_cfg(endpoint, max_failed_fraction=0.25),
                        engines=[DroppingEngine(real, ["/c1", "/c3", "/c5"])])
    with pytest.raises(JudgeFailureError, match=r"3 of 8 verifier judgments failed.*prover.verifier.base_url"):
        asyncio.run(many(completions, **kw))


def test_prover_reward_stops_when_the_verifier_is_down():
    dead = EndpointConfig(base_url="http://127.0.0.1:9/v1", api_key="k", model="verifier", max_retries=0,
                          timeout_s=5)
    cfg = ProverRLConfig(enabled=True, verifier=dead)
    cfg.judge = dataclasses.replace(cfg.judge, n=2, max_tokens=16)
    probs = synthetic_problems(2, seed=3)
    r = ProverReward(cfg)
    with pytest.raises(JudgeFailureError, match="2 of 2 verifier judgments failed"):
        asyncio.run(r([[{"role": "assistant", "content": "Step 0: x"}]] * 2, **_columns(probs, 1)))
    assert r.last.n_failed == 2


def test_prover_config_errors():
    with pytest.raises(ValueError, match="prover.policy"):
        ProverRLConfig(policy="median").validate()
    with pytest.raises(ValueError, match="prover.reward"):
        ProverRLConfig(reward="oracle").validate()


def test_prover_rl_experiment_composes_on_both_profiles():
    from training.config import GRPORunConfig
    from training.prover_grpo import check_scale
    from training.scale import ToyScaleError
    from verifier.config import compose

    tiny = compose("grpo", GRPORunConfig, ["experiment=prover_rl", "prover.pool.rule=majority",
                                           "prover.pool.verifiers=[{base_url: 'http://h:1/v1', model: v2}]"])
    assert tiny.prover.enabled and tiny.experiment_name == "prover_rl" and tiny.prover.judge.n == 2
    assert tiny.prover.pool.verifiers[0].model == "v2" and tiny.grpo.max_completion_length == 64
    check_scale(tiny)  # the tiny model with tiny values: fine
    cluster = compose("grpo", GRPORunConfig, ["experiment=prover_rl", "profile=cluster", "model=qwen3_8b"])
    assert cluster.prover.judge.n == 8 and cluster.prover.eval_passes == 8
    with pytest.raises(ToyScaleError, match="prover.problems=null"):  # synthetic problems on a real model
        check_scale(cluster)
    # a cluster prover run passes the scale check (docs/prover.md's commands: tests/test_cluster_docs.py)
    check_scale(compose("grpo", GRPORunConfig, [
        "profile=cluster", "experiment=prover_rl", "model=qwen3_8b_full", "init_from=/scratch/prover_sft/final",
        "prover.problems=/data/p.jsonl", "prover.eval_problems=/data/pb.csv", "prover.judge.max_tokens=8192",
        "grpo.max_completion_length=16384", "eval.judge.max_tokens=16384"]))
    with pytest.raises(ToyScaleError):  # a real model with the tiny profile's budgets stops before loading
        check_scale(compose("grpo", GRPORunConfig, ["experiment=prover_rl", "model=qwen3_8b"]))


@pytest.mark.vllm
@pytest.mark.slow
def test_prover_rl_accelerate_launch_with_the_served_verifier(tmp_path, tiny_model, endpoint):
    """The contract command: GRPO on problems with the served verifier's acceptance as reward (real vLLM
    server), then held-out ProverBench on the saved prover (vllm.LLM) judged by the same server."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "prover"
    rx = synthetic_verdict_regex(50, 0).replace("\n", "\\n")
    cmd = [str(Path(sys.executable).parent / "accelerate"), "launch", "training/grpo.py", "experiment=prover_rl",
           f"output_dir={out}", f"model.name_or_path={tiny_model}", "grpo.max_steps=2", "data.n_train=8",
           "data.n_eval=6", "wandb.enabled=false", f"prover.verifier.base_url={endpoint.base_url}",
           f"prover.verifier.model={endpoint.model}", f"prover.verifier.api_key={endpoint.api_key}",
           f"+prover.verifier.extra_body.structured_outputs.regex='{rx}'", "prover.policy=mean"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(repo), WANDB_MODE="offline")
    p = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    hist = [h for h in json.loads((out / "train_log.json").read_text()) if "rewards/prover/mean" in h]
    assert len(hist) == 2 and all("prover/accept_rate" in h and "prover/true_rate" in h for h in hist)
    summary = json.loads((out / "train_summary.json").read_text())["train"]["prover_reward"]
    assert summary["completions"] == 2 * 4 and summary["judge_failed"] == 0 and summary["checked"] == 8
    m = json.loads((out / "metrics.json").read_text())
    assert m["heldout"]["model"] == str(out / "final") and m["n"] == 6 and m["passes"] == 2
    assert set(m["gold"]) == {"round0", "refined"} and m["gold"]["round0"]["n"] == 6
    assert (out / "heldout" / "proofs.jsonl").exists() and (out / "heldout" / "report.md").exists()
    assert "test-key" not in (out / "config.json").read_text()  # the API key never reaches a file


# ---------------------------------------------------------------------------------------------- thinking provers


def _thinking_completions(probs):
    """A thinking prover's completions: thinking (a wrong draft) then the gold proof; thinking cut by the token
    budget (no closing tag); a non-thinking proof."""
    gold = [proof_text(gold_proof(p.problem)) for p in probs]
    texts = [f"<think>\nStep 0: DRAFT 1 + 1 = 3?\n\nStep 1: no wait.</think>\n{gold[0]}",
             f"<think>\nStep 0: DRAFT {gold[1]} and then, hmm",
             gold[2]]
    return gold, [[{"role": "assistant", "content": t}] for t in texts]


@pytest.mark.parametrize("verifier", ["fake", pytest.param("served", marks=pytest.mark.vllm)])
def test_prover_reward_judges_the_proof_after_the_thinking(verifier, request):
    """The verifier receives only the proof after ``</think>`` (the very prompt of the bare proof); an
    unfinished thinking is never sent, earns 0 and is counted; a non-thinking prover's text is unchanged."""
    probs = synthetic_problems(3, seed=4)
    gold, completions = _thinking_completions(probs)
    if verifier == "served":  # the session vLLM server, its verdicts steered to accept half the passes
        cfg = _cfg(request.getfixturevalue("endpoint"))
        real = OpenAIEngine(cfg.verifier)
    else:
        cfg, real = ProverRLConfig(enabled=True, judge=dataclasses.replace(ProverRLConfig().judge, n=2)), None
    logged = {}
    kw = {**_columns(probs, 1), "log_metric": lambda k, v: logged.__setitem__(k, v)}
    think, bare = RecordingEngine(real), RecordingEngine(real)
    r = ProverReward(cfg, engines=[think])
    out = asyncio.run(r(completions, **kw))
    plain = asyncio.run(ProverReward(cfg, engines=[bare])([[{"role": "assistant", "content": g}] for g in gold],
                                                           **_columns(probs, 1)))
    assert out[1] == 0.0 and r.last.n_unfinished == 1 and logged["prover/unfinished_thinking"] == 1
    assert r.last.n_checked == 3 and r.last.n_true == 2  # the unfinished one is no true proof
    assert [out[0], out[2]] == [plain[0], plain[2]]  # same seeds, same prompts: same verdicts
    if verifier == "fake":
        assert out == [1.0, 0.0, 1.0] and r.last.n_accepted == 2
    assert [any(f"/c{i}" in k for k in think.prompts) for i in range(3)] == [True, False, True]  # c1 never sent
    assert think.prompts == {k: v for k, v in bare.prompts.items() if "/c1" not in k}
    assert not any("DRAFT" in p or "think>" in p for p in think.prompts.values())
    assert all(s in next(iter(think.prompts.values())) for s in gold_proof(probs[0].problem))
    from training.prover_reward import summary
    assert summary([r])["unfinished_thinking"] == 1 and summary([r])["per_step"][0]["unfinished_thinking"] == 1


def test_prover_reasoning_formats_and_the_gold_reward():
    """``prover.reasoning_format``: ``think`` (default), ``think_opened`` (the template opened the thinking),
    ``none`` (a non-thinking prover: the text is judged as written); the gold reward reads the same proof."""
    probs = synthetic_problems(3, seed=4)
    gold, completions = _thinking_completions(probs)
    cols = _columns(probs, 1)
    assert GoldReward()(completions, **cols) == [1.0, 0.0, 1.0]
    assert GoldReward(reasoning_format="none")(completions, **cols) == [0.0, 0.0, 1.0]  # the draft judged as steps
    judge = dataclasses.replace(ProverRLConfig().judge, n=1, max_tokens=64)

    def sent(fmt, comps):
        rec = RecordingEngine()
        r = ProverReward(ProverRLConfig(enabled=True, judge=judge, reasoning_format=fmt), engines=[rec])
        return asyncio.run(r(comps, **cols)), r.last.n_unfinished, rec.prompts

    out, unfinished, prompts = sent("none", completions)
    assert out == [1.0] * 3 and unfinished == 0 and sum("DRAFT" in p for p in prompts.values()) == 2
    opened = [[{"role": "assistant", "content": "DRAFT</think>\n" + gold[0]}],  # the prompt opened <think>
              [{"role": "assistant", "content": "DRAFT without an end"}], [{"role": "assistant", "content": gold[2]}]]
    out, unfinished, prompts = sent("think_opened", opened)
    assert out == [1.0, 0.0, 0.0] and unfinished == 2 and len(prompts) == 1 and "DRAFT" not in str(prompts)
    # TRL parsed the thinking off by the chat template (transformers' response schema): nothing ended it
    parsed = [[{"role": "assistant", "reasoning_content": "DRAFT", "content": gold[0]}],
              [{"role": "assistant", "reasoning_content": "DRAFT cut mid-thought", "content": ""}], completions[2]]
    out, unfinished, prompts = sent("think", parsed)
    assert out == [1.0, 0.0, 1.0] and unfinished == 1 and len(prompts) == 2 and "DRAFT" not in str(prompts)
    with pytest.raises(ValueError, match="prover.reasoning_format"):
        ProverRLConfig(reasoning_format="harmony").validate()


def test_gold_table_reads_the_judgments_files_through_judgment(tmp_path):
    """``gold_table`` reads ProverBench's files (``proofs.jsonl``, each member's judgments) as judgment records:
    round 0 and the latest version of each (problem, sample); accepted = every member accepts (rule ``all``)."""
    from training.prover_reward import gold_table
    from verifier.aggregate import AggregationPolicy, aggregate
    from verifier.identity import version_id
    from verifier.io import write_jsonl
    from verifier.judgment import Judgment
    from verifier.parser import format_verification, parse_verification
    from verifier.records import ProofTrajectory

    probs = synthetic_problems(2, seed=3)
    ok, bad = (parse_verification(format_verification(v, s, "r")) for v, s in (("valid", -1), ("invalid", 0)))
    wrong = ["Step 0: 1 + 1 = 3"]
    versions = [(probs[0], 0, gold_proof(probs[0].problem), [ok, ok], [ok]),  # true, accepted by both
                (probs[1], 0, wrong, [bad], [ok]),  # false, rejected by member 0: revised
                (probs[1], 1, wrong, [ok], [ok])]  # its revision: false but accepted (hacked)
    trajs, rows = [], [[], []]
    for p, r, steps, *member_passes in versions:
        t = ProofTrajectory(version_id(p.id, 0, r), p.id, p.problem, tuple(steps), meta={"round": r, "proof_index": 0})
        trajs.append(t.to_dict())
        for k, ps in enumerate(member_passes):
            rows[k].append(Judgment(t.id, aggregate(ps, AggregationPolicy(n=len(ps))), ps, n=len(ps)).to_row())
    write_jsonl(tmp_path / "proofs.jsonl", trajs)
    write_jsonl(tmp_path / "judgments.jsonl", rows[0])
    write_jsonl(tmp_path / "judgments.pool1.jsonl", rows[1])
    g = gold_table(tmp_path, 2, "all")
    assert (g["round0"]["n"], g["round0"]["true_acc"], g["round0"]["accept"], g["round0"]["hacked"]) == (2, 0.5, 0.5, 0)
    assert (g["refined"]["n"], g["refined"]["accept"], g["refined"]["hacked"]) == (2, 1.0, 1)
    assert g["refined"]["per_proof"] == {f"{probs[0].id}/0": [1, 1], f"{probs[1].id}/0": [0, 1]}
