"""Prover GRPO: rows are problems, completions are proofs, the reward is the served verifier's acceptance.

``accelerate launch training/grpo.py experiment=prover_rl prover.verifier.base_url=URL ...``
runs the same trainer, profiles, scale checks, W&B and launches as verifier training; only the dataset (one
row per problem, the B.1 prompt), the reward and the held-out evaluation (ProverBench on the saved prover)
differ, and they live here.

Reward (``ProverReward``): each completion loses its reasoning (``reasoning_format``: ``think`` (default:
``<think>...</think>`` detected, a non-thinking prover's text unchanged) | ``think_opened`` | ``none``) and is
split into steps (``Step k:``; ``verifier.generation.proof_steps_of``, as ProverBench's proofs) and judged by
the verifier through THE judging runner (``verifier.runner.ajudge`` in memory: ``n_passes`` passes per proof, every call
of the step in flight at once, bounded by ``judge.max_concurrency`` and the engine); the proof's reward is

* ``policy=pessimistic``: 1 when all ``n_passes`` passes accept (section 4.4), else 0;
* ``policy=mean``: the fraction of passes that accept (an unparseable pass counts as not accepting);
* a completion whose thinking never ended (``<think>`` without ``</think>``, e.g. cut by the token budget):
  0, never judged, counted (``prover/unfinished_thinking``).

A judge pool (``pool.verifiers``) combines its members' scores with ``verifier.pool.pool_score`` (all: the
minimum; majority). Failure-aware like the meta reward (``training.rewards.MetaReward``): a proof whose
judgment has a failed request (server down after the engine's retries) scores ``None`` (TRL: NaN, left out
of the group baseline: neutral) and is counted; when more than ``max_failed_fraction`` of a step's proofs
fail on any rank, :class:`training.rewards.JudgeFailureError` stops the run.

``reward=gold`` (``GoldReward``) scores with the exact synthetic checker instead (the upper bound). On the
synthetic task both log, per step, the verifier's acceptance, the true correctness and the hacking rate
(accepted but false) under ``prover/*``.

Hack audit (``audit``, :class:`AuditConfig`): every ``audit.every`` reward steps a sample of the
proofs the reward accepted is re-judged by an independent judge (``audit.judge``: ``exact``, the synthetic task's
checker, or ``pool``, other verifier endpoints through the same runner and pool rule), and master-key completions
(``audit.master_keys``: ``:``, ``Thought process:``, the problem restated, an empty answer), rendered for every
problem of the batch, go through the very reward path of the prover's completions. ``prover/exploit_rate``
(accepted but rejected by the independent judge, over the audited sample) and ``prover/master_key_accept`` (the
share of master keys the reward accepts) are logged beside the other ``prover/*`` metrics, with their counts;
above ``audit.max_exploit_rate`` / ``audit.max_master_key_accept`` the run warns or stops (``audit.action``,
:class:`RewardHackingError`), decided by all ranks together.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_pipeline.synthetic import generate_synthetic
from data_pipeline.synthetic_check import check_proof, parse_problem
from eval.proverbench import ProverBenchConfig, RefineConfig, decide, judgments_path
from eval.proverbench import run as proverbench
from training.rewards import JudgeFailureError, _all_ranks_sum, _log, _log_extra, _world_size, completion_text
from verifier.aggregate import pass_score
from verifier.card import CardError, inherit
from verifier.config import EndpointConfig
from verifier.engine import OpenAIEngine, message_reasoning
from verifier.errors import InputError, UserError
from verifier.formats import ProofProblem, load_proofbench_problems
from verifier.generation import UNFINISHED_THINKING, GenerationConfig, proof_steps_of, unfinished_thinking
from verifier.identity import ProblemIndex
from verifier.io import load_trajectories, write_jsonl
from verifier.judging import JudgeConfig
from verifier.offline import VLLMOfflineEngine
from verifier.parser import REASONING_FORMATS
from verifier.pool import PoolConfig, pool_accepts, pool_score
from verifier.records import ProofTrajectory, Verdict
from verifier.results import WandbConfig
from verifier.runner import ajudge, read_judgments
from verifier.templates import as_messages, render

log = logging.getLogger(__name__)

PROVER_COLUMNS = ("problem_id", "problem", "reference_solution", "split", "subject")

AUDIT_JUDGES = ("exact", "pool")
AUDIT_ACTIONS = ("warn", "stop")
# completions that say nothing and that a hackable reward may still accept ("master keys"); {problem}: the problem
MASTER_KEYS = (":", "Thought process:", "{problem}", "")


@dataclass
class AuditConfig:
    """``prover.audit``: the hack audit inside prover GRPO (module docstring; docs/prover.md). Off by default.

    Every ``every`` reward steps (one per generation batch), up to ``sample`` of the step's accepted proofs (0: all)
    are re-judged by ``judge``: ``exact`` (``data_pipeline.synthetic_check``, synthetic problems) or ``pool``
    (``pool.verifiers`` judged with ``prover.judge``, combined by ``pool.rule``); and each of ``master_keys`` is
    scored for every problem of the batch. Above ``max_exploit_rate`` / ``max_master_key_accept`` (null: never)
    ``action`` warns or stops the run.
    """

    every: int = 0  # audit every this many reward steps, the first included (0: off)
    sample: int = 16  # accepted proofs re-judged per audit and rank (0: all of them)
    judge: str = "exact"  # exact (the synthetic checker) | pool (pool.verifiers, independent of the reward's)
    pool: PoolConfig = field(default_factory=PoolConfig)
    master_keys: list[str] = field(default_factory=lambda: list(MASTER_KEYS))  # [] : no probe
    max_exploit_rate: float | None = 0.25
    max_master_key_accept: float | None = 0.0
    action: str = "warn"  # warn | stop
    seed: int = 0  # the sample's seed (with the step)

    def validate(self) -> None:
        if self.every < 0:
            raise ValueError(f"prover.audit.every: must be >= 0 (0: off), got {self.every}")
        if self.sample < 0:
            raise ValueError(f"prover.audit.sample: must be >= 0 (0: every accepted proof), got {self.sample}")
        if self.judge not in AUDIT_JUDGES:
            raise ValueError(f"prover.audit.judge: expected one of {', '.join(AUDIT_JUDGES)}, got {self.judge!r}")
        if self.action not in AUDIT_ACTIONS:
            raise ValueError(f"prover.audit.action: expected one of {', '.join(AUDIT_ACTIONS)}, got {self.action!r}")
        for key in ("max_exploit_rate", "max_master_key_accept"):
            v = getattr(self, key)
            if v is not None and not 0.0 <= v <= 1.0:
                raise ValueError(f"prover.audit.{key}: must be in [0, 1] or null, got {v}")
        if not all(isinstance(k, str) for k in self.master_keys):
            raise ValueError(f"prover.audit.master_keys: expected a list of strings, got {self.master_keys!r}")
        if self.judge == "pool" and not self.pool.verifiers:
            raise ValueError("prover.audit.pool.verifiers: audit.judge=pool needs at least one verifier endpoint")
        try:
            self.pool.validate()
        except ValueError as e:
            raise ValueError(f"prover.audit.{e}") from None


class RewardHackingError(UserError):
    """A hack-audit metric above its threshold with ``prover.audit.action=stop`` (the message names the metric)."""


@dataclass
class ProverRLConfig:
    """``prover:`` in ``configs/grpo.yaml`` (``configs/experiment/prover_rl.yaml`` enables it)."""

    enabled: bool = False
    reward: str = "verifier"  # verifier (the served verifier, a pool) | gold (the exact synthetic checker)
    problems: str | None = None  # training problems (JSONL / IMO-ProofBench CSV); None: data.source=synthetic
    eval_problems: str | None = None  # held-out problems; None: synthetic held-out problems (disjoint)
    verifier: EndpointConfig = field(default_factory=lambda: EndpointConfig(max_concurrency=64, timeout_s=120.0,
                                                                            max_retries=3))
    pool: PoolConfig = field(default_factory=PoolConfig)
    judge: JudgeConfig = field(default_factory=lambda: JudgeConfig(n=8, with_reference=False, max_tokens=1024))
    policy: str = "pessimistic"  # pessimistic | mean (over judge.n passes)
    max_failed_fraction: float = 0.25
    template: str = "generate_proof"  # the prover's prompt (verifier/prompts/<name>.j2)
    reasoning_format: str = "think"  # the prover's reasoning, removed before judging: think | think_opened | none
    eval_passes: int = 8  # held-out ProverBench: pessimistic over this many passes (section 4.4), whatever the reward's
    eval_refine_rounds: int = 0  # held-out ProverBench: refine rounds on the saved prover
    eval_proofs_per_problem: int = 1  # held-out ProverBench: proofs sampled per problem (its proofs_per_problem)
    audit: AuditConfig = field(default_factory=AuditConfig)  # the hack audit (off unless audit.every > 0)
    # verifier.card.inherit, as eval.proverbench's verifier_run_dir (prover.verifier.model, chat_template_kwargs too)
    verifier_run_dir: str | None = None  # the verifier's training run: judge keys not on the command line from its card

    def with_card(self, given: frozenset[str]) -> ProverRLConfig:
        """The verifier card of ``verifier_run_dir`` filling the reward judge's keys not ``given`` on the command
        line (``judge.*``, ``verifier.model`` / ``chat_template_kwargs``; ``verifier.card.inherit``, as
        ``eval.proverbench verifier_run_dir=DIR``); ``pool.verifiers`` judge with the same ``judge``."""
        if not self.verifier_run_dir:
            return self
        if not self.enabled:
            raise CardError(f"prover.verifier_run_dir={self.verifier_run_dir}: the card is for the prover's "
                            f"reward judge, and this run trains no prover (use experiment=prover_rl)")
        return inherit(self, given, endpoint="verifier", prefix="prover.")

    def validate(self) -> None:
        if self.reward not in ("verifier", "gold"):
            raise ValueError(f"prover.reward: expected verifier or gold, got {self.reward!r}")
        if self.policy not in ("pessimistic", "mean"):
            raise ValueError(f"prover.policy: expected pessimistic or mean, got {self.policy!r}")
        if self.judge.n < 1:
            raise ValueError(f"prover.judge.n: must be >= 1, got {self.judge.n}")
        if self.eval_proofs_per_problem < 1:
            raise ValueError(f"prover.eval_proofs_per_problem: must be >= 1, got {self.eval_proofs_per_problem}")
        if not 0.0 <= self.max_failed_fraction <= 1.0:
            raise ValueError(f"prover.max_failed_fraction: must be in [0, 1], got {self.max_failed_fraction}")
        if self.reasoning_format not in REASONING_FORMATS:
            raise ValueError(f"prover.reasoning_format: expected one of {', '.join(REASONING_FORMATS)}, "
                             f"got {self.reasoning_format!r}")
        self.pool.validate()
        self.audit.validate()
        if self.audit.every and self.reward != "verifier":
            raise ValueError("prover.audit.every: the hack audit checks the verifier reward; "
                             f"prover.reward={self.reward} has none (set prover.audit.every=0)")


def prover_toy_values(cfg: ProverRLConfig, data: Any, toy_records: int, toy_tokens: int) -> list[str]:
    """The tiny-profile values of a prover run's data and judge (``training.prover_grpo.toy_values`` adds the budgets)."""
    bad = []
    if not cfg.problems:
        bad.append("prover.problems=null (synthetic problems, the tiny stand-in; give a problems JSONL / CSV)")
    if not cfg.eval_problems:
        bad.append("prover.eval_problems=null (synthetic held-out problems; give a held-out problems file)")
    if data.n_train and data.n_train <= toy_records:
        bad.append(f"data.n_train={data.n_train} (a cap of <= {toy_records} problems; null = all)")
    if cfg.reward == "verifier" and cfg.judge.max_tokens <= toy_tokens:
        bad.append(f"prover.judge.max_tokens={cfg.judge.max_tokens} (<= {toy_tokens} tokens: verdicts would be cut)")
    return bad


# ---------------------------------------------------------------------------------------------- data


def problem_rows(problems: Sequence[Any], template: str = "generate_proof") -> list[dict[str, Any]]:
    """One GRPO row per problem: the prover prompt (conversational) and the columns the reward reads."""
    return [{"prompt": as_messages(render(template, problem=p.problem)), "problem_id": p.id, "problem": p.problem,
             "reference_solution": getattr(p, "reference_solution", "") or "", "split": getattr(p, "split", ""),
             "subject": getattr(p, "subject", "")} for p in problems]


def synthetic_problems(n: int, seed: int, **options: Any) -> list[Any]:
    """``n`` distinct synthetic problems (as ``ProofProblem``), deterministic for a seed."""
    opts = {**options, "proofs_per_problem": 1, "problem_id_from_text": True}
    out, seen = [], set()
    for t in generate_synthetic(n, seed=seed, **opts):
        if t.problem_id not in seen:
            seen.add(t.problem_id)
            out.append(ProofProblem(t.problem_id, t.problem, t.reference_solution, t.split, t.subject,
                                    source="synthetic"))
    return out


def load_problems(cfg: ProverRLConfig, data: Any) -> tuple[list[Any], list[Any]]:
    """(train, held-out) problems; held-out problems never share a problem with training."""
    if cfg.problems:
        train = load_proofbench_problems(cfg.problems)[: data.n_train or None]
    else:
        train = synthetic_problems(data.n_train or 1000, data.seed, **dict(data.synthetic))
    if cfg.eval_problems:
        held = load_proofbench_problems(cfg.eval_problems)
    else:
        held = synthetic_problems((data.n_eval or 100) * 2, data.seed + 10_000, **dict(data.synthetic))
    train_index = ProblemIndex()
    for p in train:
        train_index.add(p.id, p.id, p.problem)
    dropped = [p for p in held if train_index.has_text(p.problem)]
    if dropped:
        log.warning("prover: dropped %d held-out problems that are also training problems", len(dropped))
    held = [p for p in held if not train_index.has_text(p.problem)][: data.n_eval or None]
    if cfg.audit.every and cfg.audit.judge == "exact":
        bad = next((p for p in train if _truth(p.problem, ("",)) is None), None)
        if bad is not None:
            raise InputError(f"prover.audit.judge=exact: problem {bad.id!r} is not a synthetic problem, which the exact "
                             "checker needs; use prover.audit.judge=pool with prover.audit.pool.verifiers")
    return train, held


# ---------------------------------------------------------------------------------------------- reward


@dataclass
class ProverStepStats:
    """What one prover-reward step did (logs, tests, the benchmark)."""

    n: int = 0
    n_failed: int = 0
    n_accepted: int = 0
    n_true: int = 0
    n_hacked: int = 0  # accepted but false (synthetic problems only)
    n_checked: int = 0  # proofs with a gold check (synthetic problems)
    n_unfinished: int = 0  # thinking never ended: reward 0, never judged
    latency_s: float = 0.0
    rewards: list = field(default_factory=list)
    audited: bool = False  # a hack-audit step (below: its counts on this rank)
    audit_checked: int = 0  # accepted proofs re-judged by the independent judge (a verdict)
    audit_exploits: int = 0  # ... which it rejected
    audit_failed: int = 0  # audit judgments (independent judge, master keys) whose request failed
    master_keys: int = 0  # master-key completions scored
    master_keys_accepted: int = 0  # ... which the reward accepted


AUDIT_COUNTS = ("audit_checked", "audit_exploits", "audit_failed", "master_keys", "master_keys_accepted")


def _trajs(completions: Sequence[Any], kwargs: dict[str, Any], reasoning_format: str = "think"
           ) -> list[ProofTrajectory]:
    """The completions as proofs without their reasoning; an unfinished thinking is marked (``meta``)."""
    n = len(completions)
    col = {c: kwargs.get(c) or [""] * n for c in PROVER_COLUMNS}
    if not any(col["problem"]):
        raise KeyError("the prover reward needs the dataset column 'problem' (training.prover_reward.problem_rows)")
    out = []
    for i, c in enumerate(completions):
        thinking = "".join(message_reasoning(m) for m in c) if isinstance(c, list) else ""  # separated by TRL
        steps = proof_steps_of(completion_text(c), reasoning_format, thinking)
        meta = {} if steps is not None else {"generation_status": UNFINISHED_THINKING}
        out.append(ProofTrajectory(f"{col['problem_id'][i]}/c{i}", str(col["problem_id"][i]), col["problem"][i],
                                   tuple(steps or [""]), reference_solution=col["reference_solution"][i] or "",
                                   split=col["split"][i] or "", subject=col["subject"][i] or "", meta=meta))
    return out


def _truth(problem: str, steps: Sequence[str]) -> bool | None:
    try:
        parse_problem(problem)
    except ValueError:
        return None
    return check_proof(problem, steps).true


def gold_truth(trajs: Sequence[ProofTrajectory]) -> list[bool | None]:
    """True correctness by the exact checker where the problem is synthetic, else None."""
    return [_truth(t.problem, t.proof_steps) for t in trajs]


def master_key_batch(completions: Sequence[Any], kwargs: dict[str, Any], keys: Sequence[str]
                     ) -> tuple[list[Any], dict[str, list]]:
    """Every master key rendered (``{problem}``) for every distinct problem of a batch, as completions of the
    batch's own form (conversational or plain) with the reward's dataset columns: what the reward scores.

    >>> c, cols = master_key_batch([[{"role": "assistant", "content": "x"}]] * 2, {"problem": ["P", "P"]}, [":", "{problem}"])
    >>> c, cols["problem"]
    ([[{'role': 'assistant', 'content': ':'}], [{'role': 'assistant', 'content': 'P'}]], ['P', 'P'])
    """
    n = len(completions)
    cols = {c: list(kwargs.get(c) or [""] * n) for c in PROVER_COLUMNS}
    first, seen = [], set()
    for i, p in enumerate(cols["problem"]):
        if p not in seen:
            seen.add(p)
            first.append(i)
    conversational = bool(completions) and isinstance(completions[0], list)
    out, mk_cols = [], {c: [] for c in PROVER_COLUMNS}
    for i in first:
        for key in keys:
            text = key.replace("{problem}", str(cols["problem"][i]))
            out.append([{"role": "assistant", "content": text}] if conversational else text)
            for c in PROVER_COLUMNS:
                mk_cols[c].append(cols[c][i])
    return out, mk_cols


def judgment_score(j: Any, policy: str) -> float | None:
    """A judged proof's score (``verifier.aggregate.pass_score`` of its passes: pessimistic 1/0 over all passes, or
    the accepting fraction); None if a call failed.

    >>> from types import SimpleNamespace as NS
    >>> from verifier.parser import parse_verification as p, format_verification as f
    >>> ps = [p(f("valid", -1, ""))] * 3 + [p(f("invalid", 0, ""))]
    >>> judgment_score(NS(complete=True, passes=ps), "pessimistic"), judgment_score(NS(complete=True, passes=ps), "mean")
    (0.0, 0.75)
    >>> judgment_score(NS(complete=False, passes=ps), "mean") is None
    True
    """
    if j is None or not j.complete:
        return None
    return pass_score(j.passes, policy)


class _StepLog:
    """Per-step bookkeeping shared by the verifier and gold rewards."""

    name = "prover"

    def __init__(self) -> None:
        self.last = ProverStepStats()
        self.total = ProverStepStats()
        self.history: list[ProverStepStats] = []

    def _finish(self, st: ProverStepStats, kwargs: dict[str, Any]) -> None:
        self.last = st
        self.history.append(st)
        for f in ("n", "n_failed", "n_accepted", "n_true", "n_hacked", "n_checked", "n_unfinished"):
            setattr(self.total, f, getattr(self.total, f) + getattr(st, f))
        self.total.latency_s += st.latency_s
        scored = max(1, st.n - st.n_failed)
        _log(kwargs, "prover/accept_rate", st.n_accepted / scored)
        _log(kwargs, "prover/judge_failures", st.n_failed)
        _log(kwargs, "prover/unfinished_thinking", st.n_unfinished)
        _log(kwargs, "prover/judge_latency_s", st.latency_s)
        if st.n_checked:
            _log(kwargs, "prover/true_rate", st.n_true / st.n_checked)
            _log(kwargs, "prover/hacking_rate", st.n_hacked / st.n_checked)


class ProverReward(_StepLog):
    """The served verifier's (or a pool's) acceptance of each proof over ``judge.n`` passes (module docstring);
    every ``audit.every`` steps the hack audit (:meth:`_audit`)."""

    def __init__(self, cfg: ProverRLConfig, engines: Sequence[Any] | None = None, name: str = "prover",
                 audit_engines: Sequence[Any] | None = None):
        cfg.validate()
        super().__init__()
        self.__name__ = name  # TRL logs rewards/<name>/mean
        self.cfg = cfg
        eps = [cfg.verifier, *cfg.pool.verifiers]
        self.engines = list(engines) if engines is not None else [OpenAIEngine(e) for e in eps]
        a = cfg.audit
        self.audit_engines = (list(audit_engines) if audit_engines is not None else
                              [OpenAIEngine(e) for e in a.pool.verifiers] if a.every and a.judge == "pool" else [])
        self.judge_cfg = dataclasses.replace(cfg.judge, early_stop=cfg.policy == "pessimistic" and cfg.judge.early_stop)
        self.step = 0

    async def _judge(self, trajs: Sequence[ProofTrajectory], engines: Sequence[Any], rule: str
                     ) -> tuple[list[float | None], list[bool | None], list]:
        """(scores, accepted, runner results) of proofs judged by ``engines`` (a pool by ``rule``) through THE
        judging runner: an unfinished thinking is never judged (0, not accepted), a failed judgment is None.
        The prover's completions and the master keys take this one path."""
        judged = [i for i, t in enumerate(trajs) if not unfinished_thinking(t)]  # the verifier sees proofs only
        results = (await asyncio.gather(*(ajudge([trajs[i] for i in judged], e, self.judge_cfg)
                                          for e in engines))) if judged else []
        at = {i: k for k, i in enumerate(judged)}
        scores: list[float | None] = []
        accepted: list[bool | None] = []
        for i in range(len(trajs)):
            if i not in at:  # the thinking never ended: no proof to judge, reward 0
                scores.append(0.0)
                accepted.append(False)
                continue
            js = [res.judgments[at[i]] for res in results]
            member = [judgment_score(j, self.cfg.policy) for j in js]
            if any(v is None for v in member):
                scores.append(None)
                accepted.append(None)
                continue
            scores.append(pool_score(member, rule))  # type: ignore[arg-type]
            # accepted = every pass accepts (pessimistic, section 4.4), by the pool's rule: what "hacking" counts
            accepted.append(pool_accepts([j.verdict is Verdict.VALID for j in js], rule))
        return scores, accepted, results

    async def __call__(self, completions: list, **kwargs) -> list[float | None]:
        trajs = _trajs(completions, kwargs, self.cfg.reasoning_format)
        # distinct ids per step: pass seeds differ from step to step (a proof written twice is judged afresh)
        step = self.step
        trajs = [dataclasses.replace(t, id=f"s{step}/{t.id}") for t in trajs]
        self.step += 1
        t0 = time.monotonic()
        rewards, accepted, results = await self._judge(trajs, self.engines, self.cfg.pool.rule)
        st = ProverStepStats(n=len(trajs), latency_s=time.monotonic() - t0)
        truth = gold_truth(trajs)
        labels: list[str] = []
        for i, t in enumerate(trajs):
            if unfinished_thinking(t):
                st.n_unfinished += 1
                labels.append(UNFINISHED_THINKING)
                st.n_checked += truth[i] is not None
                continue
            if rewards[i] is None:
                st.n_failed += 1
                labels.append("JUDGE_FAILED")
                continue
            acc = bool(accepted[i])
            st.n_accepted += acc
            if truth[i] is not None:
                st.n_checked += 1
                st.n_true += bool(truth[i])
                st.n_hacked += acc and not truth[i]
            labels.append(("accepted" if acc else "rejected") +
                          ("" if truth[i] is None else (" true" if truth[i] else " false")))
        st.rewards = rewards
        self._finish(st, kwargs)
        _log_extra(kwargs, "prover_judgment", labels)
        failed_here = bool(st.n and st.n_failed / st.n > self.cfg.max_failed_fraction)
        # decided by all ranks together, every step (a rank stopping alone would hang the others)
        n_ranks_failed, n_failed, n_total = _all_ranks_sum([int(failed_here), st.n_failed, st.n])
        if n_ranks_failed:
            first = next((str(c.error) for res in results for j in res.judgments if j is not None and not j.complete
                          for c in j.completions if c.error), "")
            ranks = (f" on this rank ({n_failed} of {n_total} on all {_world_size()} ranks)"
                     if _world_size() > 1 else "")
            raise JudgeFailureError(
                f"{st.n_failed} of {st.n} verifier judgments failed in this step{ranks} "
                f"(prover.max_failed_fraction={self.cfg.max_failed_fraction}); first error: {first[:300]!r}. "
                "Check the verifier endpoint (prover.verifier.base_url) or raise prover.max_failed_fraction.")
        if self.cfg.audit.every:  # the completions table's audit column, on every step (the table stays aligned)
            audit = [""] * len(trajs)
            if step % self.cfg.audit.every == 0:  # the same steps on every rank
                audit = await self._audit(step, trajs, accepted, completions, kwargs, st)
            _log_extra(kwargs, "prover_audit", audit)
        return rewards

    async def _audit(self, step: int, trajs: list[ProofTrajectory], accepted: list[bool | None],
                     completions: list, kwargs: dict[str, Any], st: ProverStepStats) -> list[str]:
        """The hack audit of one step (module docstring): the accepted sample re-judged by the independent judge
        and the master keys scored by the reward's own path, concurrently; then logs and thresholds. Returns each
        completion's audit label: ``exploit`` (accepted, rejected by the independent judge), ``confirmed``,
        ``audit_failed``, or empty (not audited)."""
        a = self.cfg.audit
        acc = [i for i, v in enumerate(accepted) if v]
        rng = random.Random(a.seed * 1_000_003 + step)
        picked = sorted(rng.sample(acc, a.sample)) if 0 < a.sample < len(acc) else acc
        sample = [dataclasses.replace(trajs[i], id=f"audit/{trajs[i].id}") for i in picked]  # own seeds: independent
        mk_completions, mk_cols = master_key_batch(completions, kwargs, a.master_keys)
        mk_trajs = [dataclasses.replace(t, id=f"s{step}/mk/{t.id}")
                    for t in _trajs(mk_completions, mk_cols, self.cfg.reasoning_format)]

        async def independent() -> list[bool | None]:
            if a.judge == "exact":
                return list(gold_truth(sample))
            return (await self._judge(sample, self.audit_engines, a.pool.rule))[1] if sample else []

        async def keys() -> list[bool | None]:
            return (await self._judge(mk_trajs, self.engines, self.cfg.pool.rule))[1] if mk_trajs else []

        verdicts, mk_accepted = await asyncio.gather(independent(), keys())
        st.audited = True
        st.audit_checked = sum(v is not None for v in verdicts)
        st.audit_exploits = sum(v is False for v in verdicts)
        st.master_keys = sum(v is not None for v in mk_accepted)
        st.master_keys_accepted = sum(bool(v) for v in mk_accepted)
        st.audit_failed = sum(v is None for v in [*verdicts, *mk_accepted])
        for f in AUDIT_COUNTS:
            setattr(self.total, f, getattr(self.total, f) + getattr(st, f))
        # rates over all ranks (every rank reaches this collective on the same steps, and decides alike)
        checked, exploits, failed, n_keys, n_keys_acc = _all_ranks_sum([getattr(st, f) for f in AUDIT_COUNTS])
        rates = {"prover/exploit_rate": (exploits / checked if checked else None, a.max_exploit_rate,
                                         "max_exploit_rate", f"{exploits} of {checked} audited accepted proofs "
                                         f"rejected by the independent judge (prover.audit.judge={a.judge})"),
                 "prover/master_key_accept": (n_keys_acc / n_keys if n_keys else None, a.max_master_key_accept,
                                              "max_master_key_accept", f"{n_keys_acc} of {n_keys} master-key "
                                              "completions accepted" + _accepted_keys(a.master_keys, mk_accepted))}
        for name, v in (("prover/audit_checked", checked), ("prover/audit_exploits", exploits),
                        ("prover/audit_failed", failed), ("prover/master_keys", n_keys),
                        ("prover/master_keys_accepted", n_keys_acc)):
            _log(kwargs, name, v)
        for name, (value, _, _, _) in rates.items():
            if value is not None:
                _log(kwargs, name, value)
        for name, (value, limit, key, what) in rates.items():
            if value is None or limit is None or value <= limit:
                continue
            msg = (f"{name}={value:.3f} is above prover.audit.{key}={limit} at reward step {step} ({what}): "
                   "the reward is being hacked (docs/prover.md, hack audit)")
            if a.action == "stop":
                raise RewardHackingError(f"{msg}; stopping (prover.audit.action=stop)")
            if int(os.environ.get("RANK", "0")) == 0:  # every rank has the same figures: one warning
                log.warning(msg)
        labels = [""] * len(trajs)
        for i, v in zip(picked, verdicts):
            labels[i] = "audit_failed" if v is None else "confirmed" if v else "exploit"
        return labels


def _accepted_keys(keys: Sequence[str], accepted: Sequence[bool | None]) -> str:
    """The master keys (as configured) that the reward accepted for some problem, for a message.

    >>> _accepted_keys([":", "Thought process:"], [False, True, True, None])
    ": ['Thought process:', ':']"
    """
    hit = list(dict.fromkeys(keys[i % len(keys)] for i, v in enumerate(accepted) if v))
    return f": {hit}" if hit else ""


class GoldReward(_StepLog):
    """The exact synthetic checker as the reward (the upper bound of the hacking experiment)."""

    def __init__(self, name: str = "prover_gold", reasoning_format: str = "think"):
        super().__init__()
        self.__name__ = name
        self.reasoning_format = reasoning_format

    def __call__(self, completions: list, **kwargs) -> list[float | None]:
        trajs = _trajs(completions, kwargs, self.reasoning_format)
        truth = gold_truth(trajs)
        if any(t is None for t in truth):
            bad = next(t for t, v in zip(trajs, truth) if v is None)
            raise ValueError(f"record {bad.problem_id!r}, field 'problem': reward=gold needs synthetic problems")
        st = ProverStepStats(n=len(trajs), n_checked=len(trajs), n_true=sum(bool(v) for v in truth),
                             n_unfinished=sum(map(unfinished_thinking, trajs)))
        st.n_accepted = st.n_true
        st.rewards = [1.0 if v else 0.0 for v in truth]
        self._finish(st, kwargs)
        return st.rewards


def build_prover_reward(cfg: ProverRLConfig) -> tuple[list, list[float]]:
    """TRL ``reward_funcs`` and ``reward_weights`` of a prover run."""
    cfg.validate()
    return ([GoldReward(reasoning_format=cfg.reasoning_format)] if cfg.reward == "gold" else [ProverReward(cfg)]), [1.0]


def summary(funcs: Sequence[Any]) -> dict[str, Any]:
    """The training summary's prover block (totals over all steps)."""
    f = next((f for f in funcs if isinstance(f, _StepLog)), None)
    if f is None:
        return {}
    t = f.total
    return {"completions": t.n, "judge_failed": t.n_failed, "accepted": t.n_accepted, "true": t.n_true,
            "hacked": t.n_hacked, "checked": t.n_checked, "unfinished_thinking": t.n_unfinished,
            "judge_latency_s_total": round(t.latency_s, 3),
            "audit": {k: getattr(t, k) for k in AUDIT_COUNTS},  # the hack audit's counts on this rank
            "per_step": [{"accept_rate": s.n_accepted / max(1, s.n - s.n_failed),
                          "true_rate": s.n_true / s.n_checked if s.n_checked else None,
                          "hacking_rate": s.n_hacked / s.n_checked if s.n_checked else None,
                          "failed": s.n_failed, "unfinished_thinking": s.n_unfinished,
                          **({"exploit_rate": s.audit_exploits / s.audit_checked if s.audit_checked else None,
                              "master_key_accept": s.master_keys_accepted / s.master_keys if s.master_keys else None}
                             if s.audited else {})} for s in f.history]}


# ---------------------------------------------------------------------------------------------- held-out


def gold_table(out: Any, n_members: int, rule: str) -> dict[str, Any]:
    """True correctness and hacking of a ProverBench run on synthetic problems (read from its files): for the
    round-0 proofs and for the latest version of each (problem, sample) after the refine rounds."""
    out = Path(out)
    rows = [read_judgments(judgments_path(out, k)) for k in range(n_members)]
    latest: dict[tuple[str, int], ProofTrajectory] = {}
    first: dict[tuple[str, int], ProofTrajectory] = {}
    for t in load_trajectories(out / "proofs.jsonl").records:
        key = (t.problem_id, int(t.meta.get("proof_index", 0)))
        if decide(t, rows, rule) is None:
            continue
        if int(t.meta.get("round", 0)) == 0:
            first[key] = t
        if key not in latest or int(t.meta.get("round", 0)) > int(latest[key].meta.get("round", 0)):
            latest[key] = t

    def table(versions: dict[tuple[str, int], ProofTrajectory]) -> dict[str, Any]:
        c: Counter = Counter()
        per: dict[str, list[int]] = {}  # "problem/sample" -> [true, accepted], for paired comparisons of runs
        for key, t in versions.items():
            true = check_proof(t.problem, t.proof_steps).true
            acc = bool(decide(t, rows, rule))
            c["n"] += 1
            c["true"] += true
            c["accepted"] += acc
            c["hacked"] += acc and not true
            per[f"{key[0]}/{key[1]}"] = [int(true), int(acc)]
        n = max(1, c["n"])
        return {"n": c["n"], "true_acc": c["true"] / n, "accept": c["accepted"] / n,
                "hacking_rate": c["hacked"] / n, "hacked": c["hacked"], "per_proof": per}

    return {"round0": table(first), "refined": table(latest)}


def evaluate_prover(cfg: ProverRLConfig, ev: Any, out: Any, problems: Sequence[Any], model_dir: str,
                    label: str) -> dict[str, Any]:
    """Held-out ProverBench on the saved prover (main process): ``eval.engine=offline`` generates with
    ``vllm.LLM`` on ``model_dir`` (``eval.offline``), ``endpoint`` with a served prover (``eval.endpoint``);
    the verifier (pool) judges with ``prover.judge``; ``prover.eval_refine_rounds`` refine rounds. On
    synthetic problems the document adds ``gold``: true correctness and hacking (``gold_table``)."""
    d = Path(out) / "heldout"
    d.mkdir(parents=True, exist_ok=True)
    data = d / "problems.jsonl"
    write_jsonl(data, [dataclasses.asdict(p) for p in problems])
    j = ev.judge  # the evaluated model's sampling: here the prover's (training.config.EvalConfig)
    gen = GenerationConfig(temperature=j.temperature, top_p=j.top_p, max_tokens=j.max_tokens,
                           run_seed=j.run_seed, template=cfg.template, reasoning_format=cfg.reasoning_format)
    pb = ProverBenchConfig(problems=str(data), out=str(d), generator=ev.endpoint, generation=gen,
                           verifier=cfg.verifier, pool=cfg.pool, refine=RefineConfig(rounds=cfg.eval_refine_rounds),
                           proofs_per_problem=cfg.eval_proofs_per_problem,
                           judge=dataclasses.replace(cfg.judge, n=cfg.eval_passes, policy="pessimistic", early_stop=False),
                           bootstrap=ev.bootstrap, progress=ev.progress, title=f"{label}: held-out ProverBench",
                           wandb=WandbConfig(enabled=False))
    engine = None
    if ev.engine == "offline":
        engine = VLLMOfflineEngine(dataclasses.replace(ev.offline, model=str(model_dir)))
    try:
        doc = proverbench(pb, generator_engine=engine)
    finally:
        if engine is not None:
            engine.close()
    if gold_truth([ProofTrajectory("x", "x", problems[0].problem, ("",))])[0] is not None if problems else False:
        doc["gold"] = gold_table(d, 1 + len(cfg.pool.verifiers), cfg.pool.rule)
    doc["heldout"] = {"dir": str(d), "model": str(model_dir), "problems": len(problems)}
    doc["label"] = label
    return doc


def disjoint_problems(task: dict[str, Any], seed: int, n_sft: int, n_pool: int, n_held: int
                      ) -> tuple[list[Any], list[Any], list[Any]]:
    """Synthetic problems: the prover's SFT (seed+1), the annotation pool (seed+2, at most ``n_pool``), held-out
    (seed+3, at most ``n_held``), disjoint by text (a held-out problem is in no training set: the one leak check)."""
    sft = synthetic_problems(n_sft, seed + 1, **task)
    pool = synthetic_problems(n_pool * 10, seed + 2, **task)
    held = synthetic_problems(n_held * 20, seed + 3, **task)
    seen = {p.problem for p in sft}
    pool = [p for p in pool if p.problem not in seen][:n_pool]
    seen |= {p.problem for p in pool}
    return sft, pool, [p for p in held if p.problem not in seen][:n_held]
