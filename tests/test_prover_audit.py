"""The hack audit inside prover GRPO (issue 39 item 3): master keys scored by the reward's own path, accepted proofs
re-judged by an independent judge (the exact checker, a pool), thresholds that warn or stop, the config's checks.
Fake verifiers only (fast)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re

import pytest

from data_pipeline.synthetic_check import check_proof, gold_proof, proof_text
from training.prover_reward import (MASTER_KEYS, AuditConfig, ProverReward, ProverRLConfig, RewardHackingError,
                                    problem_rows, summary, synthetic_problems)
from verifier.config import EndpointConfig
from verifier.errors import EXIT_USER_ERROR, run_command
from verifier.generation import proof_steps_of
from verifier.pool import PoolConfig

FALSE_F = "Step 0: 1 + 1 = 3\n\nStep 1: So the answer is 3."  # the false proof the lenient verifier accepts
FALSE_G = "Step 0: 2 + 2 = 5\n\nStep 1: So the answer is 5."  # a false proof every verifier here rejects


class FakeVerifier:
    """A served verifier stand-in: reads the problem and the steps from the B.2 prompt it is sent and accepts the
    proof when ``accepts(problem, steps)``; records what it was sent (request key -> prompt)."""

    model = "fake-verifier"

    def __init__(self, accepts):
        self.accepts, self.prompts = accepts, {}

    async def agenerate(self, requests, sampling):
        from verifier.engine import Completion
        from verifier.parser import format_verification

        out = []
        for r in requests:
            prompt = r.messages[-1]["content"]
            self.prompts[r.key] = prompt
            problem = prompt.split("## Problem\n", 1)[1].split("\n## Proof to verify", 1)[0]
            body = prompt.split("The steps are numbered from 0.\n", 1)[1].split("\n## Your task", 1)[0]
            steps = [m.group(1).strip() for m in re.finditer(r"(?m)^Step \d+:(.*)$", body)]
            ok = self.accepts(problem, steps)
            text = format_verification("valid" if ok else "invalid", -1 if ok else 0, "Checked.")
            out.append([Completion(text, "stop")] * r.n)
        return out

    def generate(self, requests, sampling, progress=False):
        from verifier.engine import run_sync

        return run_sync(self.agenerate(requests, sampling))


def honest(problem, steps):
    return check_proof(problem, steps).true


def planted(problem, steps):  # a master key planted in the verifier: "Thought process:" opens every door
    return bool(steps) and steps[0].startswith("Thought process:") or honest(problem, steps)


def lenient(problem, steps):  # accepts one known false proof besides the true ones
    return "\n\n".join(f"Step {i}: {s}" for i, s in enumerate(steps)) == FALSE_F or honest(problem, steps)


def _batch(probs, texts_of):
    """TRL's reward kwargs for completions ``texts_of(problem)`` of every problem (conversational)."""
    completions, cols = [], {k: [] for k in ("problem_id", "problem", "reference_solution", "split", "subject")}
    for row in problem_rows(probs):
        for text in texts_of(row["problem"]):
            completions.append([{"role": "assistant", "content": text}])
            for k in cols:
                cols[k].append(row[k])
    return completions, cols


def _cfg(**audit):
    judge = dataclasses.replace(ProverRLConfig().judge, n=2, max_tokens=64)
    return ProverRLConfig(enabled=True, judge=judge, audit=AuditConfig(**{"every": 1, **audit}))


extra = {}  # the last step's completions-table columns (TRL's log_extra)


def _run(reward, completions, cols):
    logged = {}
    out = asyncio.run(reward(completions, **cols, log_metric=lambda k, v: logged.__setitem__(k, v),
                             log_extra=lambda k, v: extra.__setitem__(k, v)))
    return out, logged


def test_a_planted_master_key_is_caught_and_stops_the_run(caplog, capsys):
    """A verifier that accepts anything opening with "Thought process:" accepts that master key for every problem of
    the batch: prover/master_key_accept = 1 of the 4 default keys; warn names the metric, value and threshold; stop
    ends the step with one error line naming the metric. An honest verifier accepts no master key."""
    probs = synthetic_problems(3, seed=11)
    completions, cols = _batch(probs, lambda p: [proof_text(gold_proof(p))] * 2)
    verifier = FakeVerifier(planted)
    r = ProverReward(_cfg(), engines=[verifier])
    with caplog.at_level(logging.WARNING, logger="training.prover_reward"):
        out, logged = _run(r, completions, cols)
    assert out == [1.0] * 6 and r.last.n == 6  # the prover's own rewards and counts are the audit-free ones
    assert logged["prover/master_keys"] == 3 * len(MASTER_KEYS) and logged["prover/master_keys_accepted"] == 3
    assert logged["prover/master_key_accept"] == pytest.approx(0.25)
    assert [m for m in caplog.messages if "prover/master_key_accept=0.250 is above "
            "prover.audit.max_master_key_accept=0.0" in m and "'Thought process:'" in m]
    assert summary([r])["audit"]["master_keys_accepted"] == 3
    assert summary([r])["per_step"][0]["master_key_accept"] == pytest.approx(0.25)

    # the master keys took the prover's path: the same prompts as the same texts given as completions
    keys = [k.replace("{problem}", p.problem) for p in probs for k in MASTER_KEYS]
    plain = FakeVerifier(planted)
    mk_cols = {k: [v for v in vals[::2] for _ in MASTER_KEYS] for k, vals in cols.items()}
    asyncio.run(ProverReward(_cfg(every=0), engines=[plain])([[{"role": "assistant", "content": k}] for k in keys],
                                                              **mk_cols))
    assert sorted(v for k, v in verifier.prompts.items() if "/mk/" in k) == sorted(plain.prompts.values())
    # ... including the reasoning removal: a key that thinks first is judged on its answer, an unfinished one never
    r = ProverReward(_cfg(master_keys=["<think>plan</think>Thought process:", "<think>Thought process:"]),
                     engines=[FakeVerifier(planted)])
    _, logged = _run(r, completions, cols)
    assert logged["prover/master_keys"] == 6 and logged["prover/master_keys_accepted"] == 3

    stop = ProverReward(_cfg(action="stop", max_master_key_accept=0.2), engines=[FakeVerifier(planted)])
    with pytest.raises(RewardHackingError, match=r"prover/master_key_accept=0\.250 is above "
                                                 r"prover\.audit\.max_master_key_accept=0\.2 .*action=stop"):
        _run(stop, completions, cols)
    # a run ends with one line on stderr and exit code 2 (verifier.errors: how every command reports it)
    stop = ProverReward(_cfg(action="stop", max_master_key_accept=0.2), engines=[FakeVerifier(planted)])
    with pytest.raises(SystemExit) as e:
        run_command("grpo.py", lambda: _run(stop, completions, cols))
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == EXIT_USER_ERROR and len(err) == 1
    assert err[0].startswith("grpo.py: error: prover/master_key_accept=0.250")

    # an honest verifier accepts no master key: nothing to warn about, nothing stops even at threshold 0
    caplog.clear()
    r = ProverReward(_cfg(action="stop", max_master_key_accept=0.0), engines=[FakeVerifier(honest)])
    with caplog.at_level(logging.WARNING, logger="training.prover_reward"):
        out, logged = _run(r, completions, cols)
    assert out == [1.0] * 6 and logged["prover/master_key_accept"] == 0.0 and logged["prover/master_keys"] == 12
    assert logged["prover/exploit_rate"] == 0.0 and logged["prover/audit_checked"] == 6 and not caplog.messages


def test_the_exploit_audit_counts_exactly():
    """A verifier that accepts one known false proof besides the true ones: of the accepted proofs, the known
    false ones are the exploits; prover/exploit_rate is their share by the exact checker over the audited sample,
    and by an independent honest verifier (audit.judge=pool) over the proofs it was sent."""
    probs = synthetic_problems(4, seed=12)
    completions, cols = _batch(probs, lambda p: [proof_text(gold_proof(p)), FALSE_F, FALSE_G, FALSE_F])
    texts = [c[0]["content"] for c in completions]
    accepted = [i for i, t in enumerate(texts) if t != FALSE_G]  # 4 true + 8 known false
    exploits = [i for i in accepted if not check_proof(cols["problem"][i], proof_steps_of(texts[i])).true]
    assert len(accepted) == 12 and len(exploits) == 8  # the exact checker on the hand-made completions

    r = ProverReward(_cfg(sample=0, max_exploit_rate=None), engines=[FakeVerifier(lenient)])
    out, logged = _run(r, completions, cols)
    assert [i for i, v in enumerate(out) if v == 1.0] == accepted
    assert logged["prover/audit_checked"] == 12 and logged["prover/audit_exploits"] == 8
    assert logged["prover/exploit_rate"] == pytest.approx(len(exploits) / len(accepted))
    assert r.last.n_hacked == 8  # the same proofs the per-step gold check calls hacked

    # a sample of 3, re-judged by an independent (honest) verifier through the runner: exploits = the known false
    # ones among exactly the proofs it was sent; a step off the schedule (every=2) is not audited
    assert extra["prover_audit"] == ["" if i not in accepted else "exploit" if i in exploits else "confirmed"
                                     for i in range(len(texts))]  # the completions table: which were exploits

    judge = FakeVerifier(honest)
    r = ProverReward(_cfg(every=2, sample=3, judge="pool", max_exploit_rate=None,
                          pool=PoolConfig([EndpointConfig(model="independent")])),
                     engines=[FakeVerifier(lenient)], audit_engines=[judge])
    out, logged = _run(r, completions, cols)
    sent = sorted({int(k.split("/c")[-1].split("/")[0]) for k in judge.prompts})
    assert len(sent) == 3 and set(sent) <= set(accepted) and all(k.startswith("audit/s0/") for k in judge.prompts)
    n_false = sum(i in exploits for i in sent)
    assert logged["prover/audit_checked"] == 3 and logged["prover/audit_exploits"] == n_false
    assert logged["prover/exploit_rate"] == pytest.approx(n_false / 3)
    assert [extra["prover_audit"][i] for i in sent] == ["exploit" if i in exploits else "confirmed" for i in sent]
    _, logged = _run(r, completions, cols)  # step 1
    assert "prover/exploit_rate" not in logged and "prover/master_key_accept" not in logged
    assert extra["prover_audit"] == [""] * len(texts)
    assert summary([r])["audit"]["audit_checked"] == 3 and "exploit_rate" not in summary([r])["per_step"][1]

    # above max_exploit_rate with action=stop: one error naming the metric
    r = ProverReward(_cfg(sample=0, max_exploit_rate=0.4, action="stop"), engines=[FakeVerifier(lenient)])
    with pytest.raises(RewardHackingError, match=r"prover/exploit_rate=0\.667 is above prover\.audit\.max_exploit_rate"
                                                 r"=0\.4 .*8 of 12 audited accepted proofs"):
        _run(r, completions, cols)


def test_audit_config_errors(tmp_path):
    """Bad values stop before any work with one error naming the key; the YAML mirrors the dataclass."""
    from training import prover_grpo, recipe
    from training.config import GRPORunConfig
    from training.preflight import PreflightError
    from training.prover_reward import load_problems
    from verifier.config import compose
    from verifier.errors import InputError

    for audit, key in [({"every": -1}, "prover.audit.every"), ({"sample": -2}, "prover.audit.sample"),
                       ({"judge": "oracle"}, "prover.audit.judge"), ({"action": "halt"}, "prover.audit.action"),
                       ({"max_exploit_rate": 1.5}, "prover.audit.max_exploit_rate"),
                       ({"max_master_key_accept": -0.1}, "prover.audit.max_master_key_accept"),
                       ({"judge": "pool"}, "prover.audit.pool.verifiers"),
                       ({"pool": PoolConfig(rule="some")}, "prover.audit.pool.rule")]:
        with pytest.raises(ValueError, match=re.escape(key)):
            ProverRLConfig(audit=AuditConfig(**audit)).validate()
    with pytest.raises(ValueError, match=r"prover\.audit\.every: .*prover\.reward=gold"):
        ProverRLConfig(reward="gold", audit=AuditConfig(every=1)).validate()

    assert compose("grpo", GRPORunConfig, ["experiment=prover_rl"]).prover.audit == AuditConfig()  # YAML = schema
    bad = compose("grpo", GRPORunConfig, ["experiment=prover_rl", "prover.audit.every=5", "prover.audit.action=halt"])
    with pytest.raises(PreflightError, match=r"^prover\.audit\.action: expected one of warn, stop, got 'halt'$"):
        recipe.check_configs(bad, prover_grpo.CHECKS, endpoints_too=False)
    pool = compose("grpo", GRPORunConfig, ["experiment=prover_rl", "prover.audit.every=5", "prover.audit.judge=pool",
                                           "prover.audit.pool.verifiers=[{base_url: 'http://h:1/v1', model: v2}]"])
    recipe.check_configs(pool, prover_grpo.CHECKS, endpoints_too=False)
    assert ("prover.audit.pool.verifiers[0]", pool.prover.audit.pool.verifiers[0]) in prover_grpo.endpoints(pool)

    # the exact checker needs synthetic problems: said before training, naming the key
    path = tmp_path / "problems.jsonl"
    path.write_text('{"id": "q1", "problem": "Prove that there are infinitely many primes."}\n')
    cfg = compose("grpo", GRPORunConfig, ["experiment=prover_rl", "prover.audit.every=5", f"prover.problems={path}",
                                          f"prover.eval_problems={path}"])
    with pytest.raises(InputError, match=r"prover\.audit\.judge=exact: problem 'q1'"):
        load_problems(cfg.prover, cfg.data)
