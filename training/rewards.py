"""GRPO reward functions on TRL's reward-function contract (section 4.3).

TRL calls ``reward(prompts=..., completions=..., completion_ids=..., **columns)``
once per step with the ``B x G`` completions of the step; every extra dataset
column (``gold_verdict``, ``first_fatal_error_step``, ``trajectory``, ...; see
``data_pipeline.grpo_dataset.GRPO_COLUMNS``) arrives as a keyword list, plus
``log_metric`` / ``log_extra`` callbacks. A reward returns one float per
completion, or ``None`` where it has no opinion (TRL turns it into NaN; with the
aggregation ``training.trainer.reward_aggregation`` sets, it is left out of the group
baseline and gets no advantage from that component).

Components (composable with ``GRPOConfig.reward_weights``):

* ``format`` (:func:`format_reward`): 1 when the output parses, else 0.
* ``rough`` (:func:`rough_reward`): Rough-RL, 1 when the parsed verdict matches the
  gold polarity, else 0 (an unparseable output is gated to 0).
* ``meta`` (:class:`MetaReward`): Meta-Ver-RL, the meta-verifier's four-level grade
  (1 / 0.5 / 0.25 / 0) of the output against the expert annotation, from the LLM
  meta-verifier on its own OpenAI-compatible endpoint (async: all ``B x G`` calls
  of a step in flight at once) or the rule-based one. Unparseable outputs are
  gated to 0 without a judge call. A judge call that still fails after the
  engine's retries gives ``None`` and is counted; when more than
  ``max_failed_fraction`` of a step fails, :class:`JudgeFailureError` stops training
  (not when the meta weight is 0, as in rough_rl: then it is only logged).
  Never a silent zero.

All reading goes through :func:`verifier.parser.parse_completion`, the function the
evaluator's passes go through: with the ``completion_ids`` TRL passes and the policy's EOS
ids (:class:`CompletionReader`), a completion that ends without EOS at
``max_completion_length`` is ``truncated`` here exactly as in VerifierBench, whatever its
text holds, so it earns no reward from any component (counted and logged as
``completions/truncated_frac``; ``grpo.mask_truncated_completions`` also drops it from the
loss, TRL's alternative). Training and evaluation read outputs identically.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verifier.config import EndpointConfig, MetaVerifierConfig
from verifier.errors import InputError, UserError
from verifier.meta_verifier import make_meta_verifier
from verifier.parser import finish_reason_of, parse_completion, parse_verification
from verifier.records import (
    NO_STEP,
    Annotation,
    MetaGrade,
    MetaVerification,
    ParseStatus,
    ProofTrajectory,
    Verdict,
    VerificationOutput,
)

log = logging.getLogger(__name__)

GRADE_NAMES = tuple(g.value for g in MetaGrade)


class JudgeFailureError(UserError, RuntimeError):
    """Too many meta-verifier calls of one GRPO step failed after retries."""


def reward_meta() -> MetaVerifierConfig:
    """The GRPO reward's meta-verifier defaults: rule-based; an LLM judge on its own server, 512 tokens."""
    return MetaVerifierConfig(kind="rule", endpoint=EndpointConfig(max_concurrency=64, timeout_s=120.0, max_retries=3),
                              temperature=0.0, max_tokens=512, near=1, show_reasoning=False)


@dataclass
class RewardConfig:
    """Which reward components a run uses, their weights and the meta-verifier (section 4.3).

    ``components`` maps a component name (``format``, ``rough``, ``meta``) to its
    weight in ``GRPOConfig.reward_weights``; a weight of 0 keeps the component as a
    logged metric without using it in the advantage.

    ``meta`` is the one meta-verifier config, :class:`verifier.config.MetaVerifierConfig` (``reward.meta.kind``
    rule | llm, ``reward.meta.endpoint``, ``max_tokens``, ``temperature``, ``near``, ``show_reasoning``: the
    judge also sees the policy's <think> reasoning), which the reward and the held-out evaluation both build
    with ``verifier.meta_verifier.make_meta_verifier`` (:meth:`meta_verifier`; the held-out evaluation's
    ``run_seed`` is ``grpo.seed``). The flat keys before (``reward.meta_judge`` ...) are :data:`REWARD_RENAMED`.
    """

    components: dict[str, float] = field(default_factory=lambda: {"meta": 1.0})
    meta: MetaVerifierConfig = field(default_factory=reward_meta)
    max_failed_fraction: float = 0.25
    format_gate: bool = True  # unparseable outputs score 0 without a judge call (false: the judge grades them)
    log_rationale_chars: int = 400

    def meta_verifier(self, run_seed: int = 0) -> MetaVerifierConfig:
        """The one meta-verifier config (``meta``) with ``run_seed``."""
        return dataclasses.replace(self.meta, run_seed=run_seed)


# the flat reward.* meta-verifier keys before reward.meta: on the command line still read under the new names
# (verifier.config.renamed; reward.endpoint.base_url=... too); in a YAML file an error names the new key
REWARD_RENAMED: dict[str, str] = {
    "reward.meta_judge": "reward.meta.kind",
    "reward.endpoint": "reward.meta.endpoint",
    "reward.judge_max_tokens": "reward.meta.max_tokens",
    "reward.judge_temperature": "reward.meta.temperature",
    "reward.judge_sees_reasoning": "reward.meta.show_reasoning",
    "reward.near": "reward.meta.near",
}


# ---------------------------------------------------------------------------------------------- helpers


def completion_text(completion: Any) -> str:
    """The text of one TRL completion (conversational ``[{"role", "content"}]`` or plain string).

    >>> completion_text([{"role": "assistant", "content": "hi"}]), completion_text("plain")
    ('hi', 'plain')
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(m.get("content") or "" for m in completion if isinstance(m, dict))
    if isinstance(completion, dict):
        return completion.get("content") or ""
    raise TypeError(f"unsupported completion type {type(completion).__name__}")


@dataclass(frozen=True)
class CompletionReader:
    """How the rewards read a GRPO completion: the policy's EOS ids and ``max_completion_length``.

    With ``completion_ids`` (TRL passes them to every reward) a completion's ``finish_reason`` comes
    from :func:`verifier.parser.finish_reason_of` and its status from
    :func:`verifier.parser.parse_completion`, the evaluator's function: ``truncated`` when it ended
    without EOS at the budget. Without ids (or without a reader) only the text is parsed.
    """

    eos_token_ids: tuple[int, ...] = ()
    max_completion_length: int | None = None

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, generation_config: Any = None,
                      max_completion_length: int | None = None) -> CompletionReader:
        """The EOS ids generation stops at: the tokenizer's and the generation config's."""
        ids: set[int] = set()
        for v in (getattr(tokenizer, "eos_token_id", None), getattr(generation_config, "eos_token_id", None)):
            ids |= {v} if isinstance(v, int) else set(v or ())
        if not ids:
            raise ValueError("the policy's tokenizer has no eos_token_id: a truncated completion cannot be told "
                             "from a finished one (set the tokenizer's eos_token)")
        return cls(tuple(sorted(ids)), max_completion_length)

    def read(self, completions: Sequence[Any], n_steps: Sequence[int] | None = None,
             completion_ids: Sequence[Sequence[int]] | None = None) -> list[VerificationOutput]:
        steps = list(n_steps) if n_steps is not None else [None] * len(completions)
        if completion_ids is None or not self.eos_token_ids:
            return [parse_verification(completion_text(c), n) for c, n in zip(completions, steps, strict=True)]
        return [parse_completion(completion_text(c), finish_reason_of(ids, self.eos_token_ids,
                                                                      self.max_completion_length), n_steps=n)
                for c, n, ids in zip(completions, steps, completion_ids, strict=True)]


def parse_completions(completions: Sequence[Any], n_steps: Sequence[int] | None = None,
                      kwargs: dict[str, Any] | None = None) -> list[VerificationOutput]:
    """Read every completion with the one parser (``n_steps`` bounds the first error step).

    ``kwargs`` are the reward's keyword arguments: with a ``reader`` (:class:`CompletionReader`,
    set by :func:`build_reward_funcs`) and TRL's ``completion_ids``, truncation is decided as in
    evaluation; the step's truncated and unparseable fractions are logged.
    """
    kwargs = kwargs or {}
    reader = kwargs.get("reader") or CompletionReader()
    outputs = reader.read(completions, n_steps, kwargs.get("completion_ids"))
    if outputs:
        _log(kwargs, "completions/truncated_frac", sum(o.status is ParseStatus.TRUNCATED for o in outputs) / len(outputs))
        _log(kwargs, "completions/unparseable_frac", sum(not o.ok for o in outputs) / len(outputs))
    return outputs


def _trajectories(kwargs: dict[str, Any], n: int) -> list[ProofTrajectory]:
    """Rebuild the annotated trajectories of a step from the dataset columns."""
    if "trajectory" in kwargs and kwargs["trajectory"] is not None:
        return [ProofTrajectory.from_dict(json.loads(t) if isinstance(t, str) else t) for t in kwargs["trajectory"]]
    try:  # minimal columns: enough for the rule-based grade
        ids = kwargs.get("id") or [f"row{i}" for i in range(n)]
        out = []
        for i in range(n):
            fatal = int(kwargs["first_fatal_error_step"][i])
            ann = Annotation(first_fatal_error_step=fatal,
                             recoverable_error_steps=tuple(kwargs.get("recoverable_error_steps", [()] * n)[i] or ()),
                             fatal_step_unknown=bool(kwargs.get("fatal_step_unknown", [False] * n)[i]),
                             reviewer_comment=(kwargs.get("reviewer_comment") or [""] * n)[i] or "")
            steps = int(kwargs.get("n_steps", [max(fatal + 1, 1)] * n)[i])
            out.append(ProofTrajectory(str(ids[i]), str(ids[i]), "", tuple("" for _ in range(steps)), annotation=ann))
        return out
    except KeyError as e:
        raise KeyError(f"reward needs the dataset column {e.args[0]!r} (see data_pipeline.grpo_dataset.GRPO_COLUMNS)"
                       ) from None


def _gold(kwargs: dict[str, Any], n: int) -> list[Verdict]:
    if "gold_verdict" not in kwargs:
        raise KeyError("reward needs the dataset column 'gold_verdict' (see data_pipeline.grpo_dataset.GRPO_COLUMNS)")
    ids = kwargs.get("id") or [None] * n
    return [Verdict.parse(v, ids[i], "gold_verdict") for i, v in enumerate(kwargs["gold_verdict"])]


def batch_rates(outputs: Sequence[VerificationOutput], gold: Sequence[Verdict]) -> dict[str, float]:
    """Batch TPR (valid proofs accepted), TNR (invalid proofs rejected) and parse-failure rate.

    An unparseable output neither accepts nor rejects, so it counts against both rates.

    >>> ok = parse_verification("<final_answer>verdict: valid\\nfirst_error_step: -1</final_answer>")
    >>> bad = parse_verification("no block")
    >>> batch_rates([ok, bad, bad], [Verdict.VALID, Verdict.VALID, Verdict.INVALID])
    {'tpr': 0.5, 'tnr': 0.0, 'parse_failure_rate': 0.6666666666666666}
    """
    pos = [o for o, g in zip(outputs, gold) if g is Verdict.VALID]
    neg = [o for o, g in zip(outputs, gold) if g is Verdict.INVALID]
    out: dict[str, float] = {}
    if pos:
        out["tpr"] = sum(o.ok and o.verdict is Verdict.VALID for o in pos) / len(pos)
    if neg:
        out["tnr"] = sum(o.ok and o.verdict is Verdict.INVALID for o in neg) / len(neg)
    out["parse_failure_rate"] = sum(not o.ok for o in outputs) / max(1, len(outputs))
    return out


def _log(kwargs: dict[str, Any], name: str, value: float) -> None:
    cb = kwargs.get("log_metric")
    if cb is not None:
        cb(name, float(value))


def _log_extra(kwargs: dict[str, Any], column: str, values: list) -> None:
    cb = kwargs.get("log_extra")
    if cb is not None:
        cb(column, values)


def _world_size() -> int:
    try:
        # lazy: torch takes seconds to import; a reward scored outside training never needs it
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return 1
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _all_ranks_sum(values: list[int]) -> list[int]:
    """Sum integers over all ranks of the training process group (identity in a single process).

    Every rank calls the reward once per step, so this collective is reached by all of them.
    """
    if _world_size() == 1:
        return list(values)
    # lazy: torch takes seconds to import; only a multi-process run gets here
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor(values, dtype=torch.long, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return [int(v) for v in t.tolist()]


# ---------------------------------------------------------------------------------------------- rewards


def format_reward(completions: list, **kwargs) -> list[float]:
    """Format gate as a reward: 1.0 when the output parses (one answer block, consistent fields), else 0.0.

    >>> good = [{"role": "assistant", "content": "ok\\n<final_answer>\\nverdict: invalid\\nfirst_error_step: 1\\n</final_answer>"}]
    >>> format_reward([good, [{"role": "assistant", "content": "verdict: valid"}]], n_steps=[3, 3])
    [1.0, 0.0]
    """
    outputs = parse_completions(completions, kwargs.get("n_steps"), kwargs)
    return [1.0 if o.ok else 0.0 for o in outputs]


def rough_reward(completions: list, **kwargs) -> list[float]:
    """Rough-RL reward: 1.0 if the parsed verdict equals the gold polarity, else 0.0 (unparseable: 0).

    Also logs the batch TPR, TNR and parse-failure rate under ``rough/``.

    >>> v = [{"role": "assistant", "content": "<final_answer>\\nverdict: valid\\nfirst_error_step: -1\\n</final_answer>"}]
    >>> rough_reward([v, v, [{"role": "assistant", "content": "??"}]], gold_verdict=["valid", "invalid", "valid"])
    [1.0, 0.0, 0.0]
    """
    outputs = parse_completions(completions, kwargs.get("n_steps"), kwargs)
    gold = _gold(kwargs, len(outputs))
    for k, v in batch_rates(outputs, gold).items():
        _log(kwargs, f"rough/{k}", v)
    return [1.0 if o.ok and o.verdict is g else 0.0 for o, g in zip(outputs, gold)]


@dataclass
class StepStats:
    """What one meta-reward step did, kept for logs, tests and the benchmark."""

    n: int = 0
    n_unparseable: int = 0
    n_truncated: int = 0  # of the unparseable: cut at max_completion_length (no reward)
    n_judged: int = 0
    n_failed: int = 0
    latency_s: float = 0.0
    grades: Counter = field(default_factory=Counter)
    rewards: list = field(default_factory=list)


class MetaReward:
    """Meta-Ver-RL reward: the meta-verifier's grade of each output (1 / 0.5 / 0.25 / 0), async.

    ``judge="rule"`` uses :class:`verifier.meta_verifier.RuleMetaVerifier`; ``judge="llm"`` uses
    :class:`verifier.meta_verifier.LLMMetaVerifier` on ``endpoint`` with every judge call of the
    step in flight at once (bounded by ``endpoint.max_concurrency``; timeouts and retries in the
    engine). Unparseable outputs score 0 without a judge call (format gate). A failed judge call
    scores ``None`` and is counted; more than ``max_failed_fraction`` failures in one step raise
    :class:`JudgeFailureError`.

    >>> import asyncio
    >>> r = MetaReward(judge="rule")
    >>> exact = [{"role": "assistant", "content": "Step 1 is wrong.\\n<final_answer>\\nverdict: invalid\\nfirst_error_step: 1\\n</final_answer>"}]
    >>> near = [{"role": "assistant", "content": "<final_answer>\\nverdict: invalid\\nfirst_error_step: 2\\n</final_answer>"}]
    >>> asyncio.run(r(completions=[exact, near, [{"role": "assistant", "content": "?"}]],
    ...               gold_verdict=["invalid"] * 3, first_fatal_error_step=[1] * 3, n_steps=[4] * 3))
    [1.0, 0.5, 0.0]
    >>> r.last.n_unparseable, dict(r.last.grades)
    (1, {'EXACT_MATCH': 1, 'BASIC_MATCH': 1})
    """

    def __init__(self, judge: str = "rule", endpoint: EndpointConfig | None = None, *,
                 max_failed_fraction: float = 0.25, judge_max_tokens: int = 512, judge_temperature: float = 0.0,
                 near: int = 1, log_rationale_chars: int = 400, verifier: Any = None, name: str = "meta",
                 format_gate: bool = True, judge_sees_reasoning: bool = False,
                 reader: CompletionReader | None = None):
        self.__name__ = name  # TRL names the reward component (rewards/<name>/mean) after this
        self.judge = judge
        self.format_gate = format_gate
        self.reader = reader
        self.max_failed_fraction = max_failed_fraction
        self.log_rationale_chars = log_rationale_chars
        if verifier is not None:
            self.verifier = verifier
        else:
            if judge == "llm" and endpoint is None:
                raise InputError("the LLM meta reward needs an endpoint (reward.meta.endpoint.base_url, model, api_key_env)")
            self.verifier = make_meta_verifier(MetaVerifierConfig(
                kind=judge, endpoint=endpoint or EndpointConfig(), temperature=judge_temperature,
                max_tokens=judge_max_tokens, near=near, show_reasoning=judge_sees_reasoning), key="reward.meta.kind")
        self.last = StepStats()
        self.total = StepStats()
        self.history: list[StepStats] = []

    @classmethod
    def from_config(cls, cfg: RewardConfig, optimised: bool = True, reader: CompletionReader | None = None
                    ) -> MetaReward:
        """The configured meta reward; ``optimised=False`` (weight 0, e.g. rough_rl): a logged metric
        whose failed judge calls are counted but never stop training (they cannot reach the advantage)."""
        if not optimised and cfg.meta.kind == "llm":
            log.warning("reward.components.meta has weight 0: the LLM meta-verifier is called for logging only; "
                        "its failures are counted and never stop training")
        m = cfg.meta
        return cls(m.kind, m.endpoint,
                   max_failed_fraction=cfg.max_failed_fraction if optimised else 1.0,
                   judge_max_tokens=m.max_tokens, judge_temperature=m.temperature, near=m.near,
                   log_rationale_chars=cfg.log_rationale_chars, format_gate=cfg.format_gate,
                   judge_sees_reasoning=m.show_reasoning, reader=reader)

    async def grade(self, trajs: Sequence[ProofTrajectory], outputs: Sequence[VerificationOutput]
                    ) -> tuple[list[MetaVerification | None], float]:
        """Grade the outputs (all in flight at once); None where the format gate skipped the judge."""
        idx = [i for i, o in enumerate(outputs) if o.ok or not self.format_gate]
        t0 = time.monotonic()
        graded = await self.verifier.agrade_batch([(trajs[i], outputs[i]) for i in idx]) if idx else []
        dt = time.monotonic() - t0
        out: list[MetaVerification | None] = [None] * len(outputs)
        for i, g in zip(idx, graded, strict=True):
            out[i] = g
        return out, dt

    async def __call__(self, completions: list, **kwargs) -> list[float | None]:
        if self.reader is not None:
            kwargs.setdefault("reader", self.reader)
        outputs = parse_completions(completions, kwargs.get("n_steps"), kwargs)
        trajs = _trajectories(kwargs, len(outputs))
        gold = [t.annotation.polarity for t in trajs]  # type: ignore[union-attr]
        metas, latency = await self.grade(trajs, outputs)
        st = StepStats(n=len(outputs), latency_s=latency)
        rewards: list[float | None] = []
        rationales: list[str] = []
        grades: list[str] = []
        for o, m in zip(outputs, metas):
            if not o.ok:
                st.n_unparseable += 1
                st.n_truncated += o.status is ParseStatus.TRUNCATED
            if not o.ok and self.format_gate:
                rewards.append(0.0)
                grades.append("UNPARSEABLE")
                rationales.append(f"format gate: {o.status.value} ({o.detail})")
                continue
            st.n_judged += 1
            if m is None or m.grade is None:
                st.n_failed += 1
                rewards.append(None)
                grades.append("JUDGE_FAILED")
                rationales.append(f"judge failed: {getattr(m, 'status', None) and m.status.value} "
                                  f"{getattr(m, 'detail', '')}".strip())
                continue
            st.grades[m.grade.value] += 1
            rewards.append(m.grade.reward)
            grades.append(m.grade.value)
            rationales.append((m.rationale or "")[: self.log_rationale_chars])
        st.rewards = rewards
        self.last = st
        self.history.append(st)
        self._accumulate(st)
        self._log_step(st, outputs, gold, kwargs)
        _log_extra(kwargs, "meta_grade", grades)
        _log_extra(kwargs, "meta_rationale", rationales)
        failed_here = bool(st.n_judged and st.n_failed / st.n_judged > self.max_failed_fraction)
        # Decided by all ranks together, every step: a rank that stopped alone would leave the
        # others waiting in the next collective (gather of rewards, gradient all-reduce) forever.
        n_ranks_failed, n_failed, n_judged = _all_ranks_sum([int(failed_here), st.n_failed, st.n_judged])
        if n_ranks_failed:
            first = next((r for r in rationales if r.startswith("judge failed")), "")
            ranks = (f" on this rank ({n_failed} of {n_judged} on all {_world_size()} ranks, "
                     f"{n_ranks_failed} over the limit)" if _world_size() > 1 else "")
            raise JudgeFailureError(
                f"{st.n_failed} of {st.n_judged} meta-verifier calls failed in this step{ranks} "
                f"(max_failed_fraction={self.max_failed_fraction}); first error: {first!r}. "
                f"Check the meta-verifier endpoint (reward.meta.endpoint.base_url) or raise reward.max_failed_fraction.")
        return rewards

    def _accumulate(self, st: StepStats) -> None:
        t = self.total
        t.n += st.n
        t.n_unparseable += st.n_unparseable
        t.n_truncated += st.n_truncated
        t.n_judged += st.n_judged
        t.n_failed += st.n_failed
        t.latency_s += st.latency_s
        t.grades.update(st.grades)

    def _log_step(self, st: StepStats, outputs, gold, kwargs) -> None:
        vals = [r for r in st.rewards if r is not None]
        if vals:
            _log(kwargs, "meta/mean_reward", sum(vals) / len(vals))
        _log(kwargs, "meta/judge_latency_s", st.latency_s)
        _log(kwargs, "meta/judge_failures", st.n_failed)
        _log(kwargs, "meta/judge_failure_rate", st.n_failed / max(1, st.n_judged))
        for g in GRADE_NAMES:
            _log(kwargs, f"meta/grade_frac/{g}", st.grades.get(g, 0) / max(1, st.n))
        _log(kwargs, "meta/grade_frac/UNPARSEABLE", st.n_unparseable / max(1, st.n))
        for k, v in batch_rates(outputs, gold).items():
            _log(kwargs, f"meta/batch_{k}", v)


def _with_reader(fn: Callable, reader: CompletionReader | None) -> Callable:
    """``fn`` reading completions with ``reader`` (keeps ``__name__``: TRL names the component after it)."""
    if reader is None:
        return fn
    wrapped = functools.partial(fn, reader=reader)
    wrapped.__name__ = fn.__name__  # type: ignore[attr-defined]
    return wrapped


def build_reward_funcs(cfg: RewardConfig, reader: CompletionReader | None = None
                       ) -> tuple[list[Callable], list[float]]:
    """The TRL ``reward_funcs`` and ``reward_weights`` for a run's reward config.

    ``reader`` (:meth:`CompletionReader.for_tokenizer`, set by ``training.trainer``): every component
    reads completions with it, so a truncated completion scores 0 in each.

    >>> fns, w = build_reward_funcs(RewardConfig(components={"format": 0.1, "meta": 1.0}))
    >>> [getattr(f, "__name__") for f in fns], w
    (['format_reward', 'meta'], [0.1, 1.0])
    """
    if not cfg.components:
        raise InputError("reward.components is empty: name at least one of format, rough, meta")
    funcs: list[Callable] = []
    weights: list[float] = []
    for name, weight in cfg.components.items():
        if name == "format":
            funcs.append(_with_reader(format_reward, reader))
        elif name == "rough":
            funcs.append(_with_reader(rough_reward, reader))
        elif name == "meta":
            funcs.append(MetaReward.from_config(cfg, optimised=float(weight) != 0.0, reader=reader))
        else:
            raise InputError(f"unknown reward component {name!r} (expected format, rough or meta)")
        weights.append(float(weight))
    return funcs, weights


__all__ = [
    "NO_STEP",
    "CompletionReader",
    "JudgeFailureError",
    "MetaReward",
    "RewardConfig",
    "batch_rates",
    "build_reward_funcs",
    "completion_text",
    "format_reward",
    "parse_completions",
    "rough_reward",
]
