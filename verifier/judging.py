"""The passes of one proof: n verification passes, aggregated (section 4.4), with early stop and a pass cache.

``JudgeConfig`` is THE judge config (Hydra group ``configs/judge/default.yaml``) of every command
that judges; ``judge_item`` runs one item's passes; the loop over records, the JSONL output and
resume live in ``verifier.runner`` (the one judging runner). In-memory use::

    from verifier.judging import JudgeConfig, judge_trajectories, judgment_to_row, row_to_judgment
    judgments = judge_trajectories(trajs, engine, JudgeConfig(n=8, policy="pessimistic"))
    rows = [judgment_to_row(j) for j in judgments]          # the eval.judge JSONL format

* Pass ``k`` of trajectory ``t`` is sampled with seed ``pass_seed(t.id, k, run_seed)``; a request
  for passes ``k..k+m-1`` is ONE request ``n=m, seed=base+k`` (vLLM gives sample ``i`` the seed
  ``seed+i``), so the samples do not depend on how passes are grouped.
* ``early_stop=True`` runs the passes in waves (default 1, 1, 2, 4) and stops a proof as soon as
  ``aggregate.decided`` says the remaining passes cannot change the decision (pessimism: the first
  rejecting pass). The decisions equal those of the full run; the executed passes are a prefix of
  the full run's passes (``accept_fraction`` is over the executed passes: use ``early_stop=False``
  when the fraction is a score, e.g. for AUC).
* A prompt longer than the model context gives passes with status ``too_long`` (judgment status
  ``too_long``; under pessimism it is not accepted). Never truncated, never a crash. A budget that
  fits no prompt (``max_tokens`` plus the shortest prompt above ``max_model_len``) is a
  ``verifier.budget.BudgetError`` before the first request.
* A pass whose request failed (server down after retries) makes the judgment ``request_failed``:
  it is returned but ``complete`` is False; callers must not persist it, and a re-run redoes only
  the missing passes (the others come from the cache).
* ``PassCache`` (SQLite) keys each pass by (model + engine options, prompt hash, sampling params
  and seed, pass index); it serves repeated calls and resumed runs, so no pass is generated twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.aggregate import Aggregate, AggregationPolicy, aggregate, decided
from verifier.engine import Completion, Engine, GenerationRequest, SamplingConfig, base_seed
from verifier.errors import InputError
from verifier.parser import parse_completion, parse_verification
from verifier.records import NO_STEP, ParseStatus, ProofTrajectory, Verdict, VerificationOutput
from verifier.templates import as_messages, verification_prompt


@dataclass
class JudgeConfig:
    """How each proof is judged (mirrored by ``judge:`` in ``configs/judge.yaml``)."""

    n: int = 8  # passes per proof (section 4.4: 8)
    policy: str = "pessimistic"  # pessimistic | k_of_n | majority
    k: int | None = None  # k_of_n only (TCS-Bench: 3 of 4)
    unparseable: str = "reject"  # reject | ignore (always counted)
    early_stop: bool = False
    waves: list[int] = field(default_factory=lambda: [1, 1, 2, 4])  # pass counts per wave
    run_seed: int = 0
    with_reference: bool = True
    template: str = "verify"
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    max_concurrency: int = 256  # trajectories in flight (requests are bounded by the engine)
    model: str | None = None  # override the engine's model (e.g. a LoRA adapter name)
    # template judges (eval.judges: IneqMath, TCS-Bench, ProofJudge): how a sample is read
    parser: str = "verification"  # verification | verifier.parser.parse_<parser> | none (raw text)
    structured: bool = False  # vLLM structured outputs with eval.judges.answer_regex(parser)
    regex: str | None = None  # explicit structured-output regex (overrides ``structured``)
    rationale_chars: int = 24  # structured outputs: length of the free rationale before the answer block

    def aggregation(self) -> AggregationPolicy:
        return AggregationPolicy(kind=self.policy, n=self.n, k=self.k, unparseable=self.unparseable)  # type: ignore[arg-type]

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens)


def wave_plan(n: int, waves: Sequence[int] | None) -> list[tuple[int, int]]:
    """``(first pass, pass count)`` of each wave; the last wave size repeats until n passes.

    >>> wave_plan(8, [1, 1, 2, 4])
    [(0, 1), (1, 1), (2, 2), (4, 4)]
    >>> wave_plan(8, None), wave_plan(3, [1, 1, 2, 4]), wave_plan(10, [2, 4])
    ([(0, 8)], [(0, 1), (1, 1), (2, 1)], [(0, 2), (2, 4), (6, 4)])
    """
    if n < 1:
        raise InputError(f"n must be >= 1, got {n}")
    sizes = list(waves or [n])
    if any(int(s) < 1 for s in sizes):
        raise InputError(f"wave sizes must be >= 1, got {sizes}")
    plan, start, i = [], 0, 0
    while start < n:
        m = min(int(sizes[min(i, len(sizes) - 1)]), n - start)
        plan.append((start, m))
        start, i = start + m, i + 1
    return plan


@dataclass
class Judgment:
    """The decision on one proof: aggregate fields and the per-pass outputs (``passes[i]`` is pass i)."""

    id: str
    aggregate: Aggregate
    passes: list[VerificationOutput]
    seeds: list[int] = field(default_factory=list)
    completion_tokens: list[int] = field(default_factory=list)
    status: str = "ok"  # ok | too_long | request_failed
    early_stopped: bool = False  # fewer than n passes were run because the decision was fixed
    policy: str = "pessimistic"
    n: int = 8
    model: str = ""
    cached_passes: int = 0  # passes served by the cache (not generated in this call)
    completions: list[Completion] = field(default_factory=list, repr=False)  # raw engine output per pass

    @property
    def verdict(self) -> Verdict:
        return self.aggregate.verdict

    @property
    def first_error_step(self) -> int:
        return self.aggregate.first_error_step

    @property
    def accept_fraction(self) -> float:
        return self.aggregate.accept_fraction

    @property
    def complete(self) -> bool:
        """False when a request failed: do not persist, re-run to finish."""
        return self.status != "request_failed"

    @property
    def tokens(self) -> int:
        return sum(self.completion_tokens)


def judgment_to_row(j: Judgment) -> dict[str, Any]:
    """The ``eval.judge`` output line: id, verdict, first_error_step, accept_fraction, passes[...]."""
    a = j.aggregate
    return {
        "id": j.id,
        "verdict": a.verdict.value,
        "first_error_step": a.first_error_step,
        "accept_fraction": a.accept_fraction,
        "status": j.status,
        "policy": j.policy,
        "n": j.n,
        "n_passes": a.n_passes,
        "n_accept": a.n_accept,
        "n_reject": a.n_reject,
        "n_unparseable": a.n_unparseable,
        "early_stopped": j.early_stopped,
        "model": j.model,
        "passes": [
            {
                "index": i,
                "verdict": None if p.verdict is None else p.verdict.value,
                "first_error_step": p.first_error_step,
                "parse_status": p.status.value,
                "text": p.raw_text,
                "detail": p.detail,
                "finish_reason": p.finish_reason,
                "reasoning": p.reasoning,  # the private thinking: stored, never parsed for the verdict
                "seed": j.seeds[i] if i < len(j.seeds) else None,
                "completion_tokens": j.completion_tokens[i] if i < len(j.completion_tokens) else 0,
            }
            for i, p in enumerate(j.passes)
        ],
    }


def row_to_judgment(row: dict[str, Any]) -> Judgment:
    """Inverse of ``judgment_to_row`` (pass rationales are re-read from the text by the parser).

    >>> from verifier.parser import format_verification as f
    >>> p = parse_verification(f("invalid", 2, "step 2 is wrong"))
    >>> j = Judgment("x", aggregate([p], AggregationPolicy(n=1)), [p], [7], [5], n=1)
    >>> back = row_to_judgment(judgment_to_row(j))
    >>> (back.verdict.value, back.first_error_step, back.passes[0].rationale, back.seeds)
    ('invalid', 2, 'step 2 is wrong', [7])
    """
    passes, seeds, toks = [], [], []
    for i, p in enumerate(sorted(row.get("passes", []), key=lambda p: p["index"])):
        if p["index"] != i:
            raise InputError(f"record {row.get('id')!r}, field 'passes': pass indices are not 0..m-1")
        status = ParseStatus(p["parse_status"])
        text = p.get("text") or ""
        if status is ParseStatus.OK:
            out = parse_verification(text)
            if out.status is not ParseStatus.OK:  # parsed with n_steps originally; keep the stored fields
                out = VerificationOutput(status, Verdict.parse(p["verdict"], row.get("id"), "passes.verdict"),
                                         int(p["first_error_step"]), "", text)
        else:
            out = VerificationOutput(status, None, NO_STEP, "", text, p.get("detail", ""))
        out = dataclasses.replace(out, reasoning=p.get("reasoning") or "", finish_reason=p.get("finish_reason"))
        passes.append(out)
        seeds.append(p.get("seed"))
        toks.append(int(p.get("completion_tokens") or 0))
    agg = Aggregate(
        verdict=Verdict.parse(row["verdict"], row.get("id")),
        first_error_step=int(row["first_error_step"]),
        accept_fraction=float(row["accept_fraction"]),
        n_passes=int(row.get("n_passes", len(passes))),
        n_accept=int(row.get("n_accept", sum(p.accepts for p in passes))),
        n_reject=int(row.get("n_reject", 0)),
        n_unparseable=int(row.get("n_unparseable", sum(not p.ok for p in passes))),
    )
    return Judgment(id=str(row["id"]), aggregate=agg, passes=passes, seeds=seeds, completion_tokens=toks,
                    status=row.get("status", "ok"), early_stopped=bool(row.get("early_stopped", False)),
                    policy=row.get("policy", "pessimistic"), n=int(row.get("n", len(passes))),
                    model=row.get("model", ""))


def synthetic_verdict_regex(accept_percent: int, max_step: int = 2) -> str:
    """Guided-decoding regex for a synthetic verifier with a set accept rate (tests, benchmarks).

    The model first writes a two-digit number; ``00``..``accept_percent-1`` lead to ``valid``,
    the rest to ``invalid`` with a first error step in ``0..max_step``. With near-uniform
    next-token probabilities (the tiny random model) the accept rate is about
    ``accept_percent/100``; callers measure and report the realised rate.

    >>> import re
    >>> rx = synthetic_verdict_regex(90)
    >>> bool(re.fullmatch(rx, "42 <final_answer>\\nverdict: valid\\nfirst_error_step: -1\\n</final_answer>"))
    True
    >>> bool(re.fullmatch(rx, "95 <final_answer>\\nverdict: valid\\nfirst_error_step: -1\\n</final_answer>"))
    False
    """
    if not 0 <= accept_percent <= 100:
        raise InputError(f"accept_percent must be in 0..100, got {accept_percent}")
    nums = [f"{i:02d}" for i in range(100)]
    acc, rej = nums[:accept_percent], nums[accept_percent:]
    valid = "<final_answer>\nverdict: valid\nfirst_error_step: -1\n</final_answer>"
    invalid = f"<final_answer>\nverdict: invalid\nfirst_error_step: [0-{max_step}]\n</final_answer>"
    alts = []
    if acc:
        alts.append(f"({'|'.join(acc)}) {valid}")
    if rej:
        alts.append(f"({'|'.join(rej)}) {invalid}")
    return "|".join(f"({a})" for a in alts)


# ----------------------------------------------------------------------------------------- cache


class PassCache:
    """SQLite cache of single passes, keyed by (model, prompt hash, sampling params + seed, pass index).

    Only successful (``ok``) and ``too_long`` passes are stored; failed requests are retried.
    Safe for several processes (SQLite locking) and for the judge's worker thread.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS passes (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.commit()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(model: str, prompt_hash: str, sampling: SamplingConfig, seed: int, index: int) -> str:
        s = json.dumps([model, prompt_hash, sampling.temperature, sampling.top_p, sampling.max_tokens,
                        list(sampling.stop), seed, index])
        return hashlib.sha256(s.encode()).hexdigest()

    def get(self, key: str) -> Completion | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM passes WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        d = json.loads(row[0])
        return Completion(text=d["text"], finish_reason=d.get("finish_reason"), error=d.get("error"),
                          status=d["status"], completion_tokens=d.get("completion_tokens", 0),
                          prompt_tokens=d.get("prompt_tokens", 0), reasoning=d.get("reasoning", ""))

    def put_many(self, items: Sequence[tuple[str, Completion]]) -> None:
        rows = [(k, json.dumps({"text": c.text, "finish_reason": c.finish_reason, "error": c.error,
                                "status": c.status, "completion_tokens": c.completion_tokens,
                                "prompt_tokens": c.prompt_tokens, "reasoning": c.reasoning}))
                for k, c in items if c.status in ("ok", "too_long")]
        if not rows:
            return
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO passes (key, value) VALUES (?, ?)", rows)
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM passes").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def engine_fingerprint(engine: Engine, model_override: str | None = None) -> str:
    """Model name plus engine options that change samples (e.g. guided decoding in ``extra_body``)."""
    model = model_override or getattr(engine, "model", "")
    cfg = getattr(engine, "cfg", None)
    extra = dict(getattr(cfg, "extra_body", None) or {})
    if hasattr(cfg, "request_options"):  # reasoning budget, effort and chat-template arguments
        extra.update(cfg.request_options())
    return model + ("|" + json.dumps(extra, sort_keys=True, default=str) if extra else "")


# ---------------------------------------------------------------------------------- submission


Submit = Callable[[GenerationRequest], Awaitable[list[Completion]]]


class _Batcher:
    """Per-request submission on top of a batch-only engine (``agenerate``): requests that are
    submitted while a batch runs form the next batch (e.g. the vLLM offline engine)."""

    def __init__(self, engine: Engine, sampling: SamplingConfig):
        self.engine, self.sampling = engine, sampling
        self.queue: list[tuple[GenerationRequest, asyncio.Future]] = []
        self.task: asyncio.Task | None = None

    async def __call__(self, req: GenerationRequest) -> list[Completion]:
        fut = asyncio.get_running_loop().create_future()
        self.queue.append((req, fut))
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._drain())
        return await fut

    async def _drain(self) -> None:
        while self.queue:
            size = -1
            while size != len(self.queue):  # let every ready coroutine enqueue first
                size = len(self.queue)
                await asyncio.sleep(0)
            batch, self.queue = self.queue, []
            try:
                results = await self.engine.agenerate([r for r, _ in batch], self.sampling)
            except Exception as e:  # noqa: BLE001 - handed to every waiting caller
                for _, f in batch:
                    if not f.done():
                        f.set_exception(e)
                continue
            for (_, f), res in zip(batch, results):
                if not f.done():
                    f.set_result(res)


@contextlib.asynccontextmanager
async def _submitter(engine: Engine, sampling: SamplingConfig):
    if hasattr(engine, "session"):
        async with engine.session(sampling) as submit:  # type: ignore[attr-defined]
            yield submit
    else:
        yield _Batcher(engine, sampling)


# ------------------------------------------------------------------------------------- judging


@dataclass
class Item:
    """One thing to judge: an id (resume key, request key), its prompt, and how a completion is read.

    ``seed_key`` names the seed stream (pass k has seed ``base_seed(seed_key, run_seed) + k``);
    ``parse(completion)`` returns a ``VerificationOutput`` (aggregated under the policy) or another
    parsed answer (``JudgeAnswer``; None when the judge's parser is ``none``: raw text).
    """

    id: str
    prompt: str
    parse: Callable[[Completion], Any]
    seed_key: str = ""
    columns: dict[str, Any] = field(default_factory=dict)  # written with the row (e.g. the prompt's choices)


def verification_item(traj: ProofTrajectory, cfg: JudgeConfig) -> Item:
    """The verification prompt of a trajectory (template and reference solution from ``cfg``).

    The row records the prompt's choices: ``template`` and ``with_reference`` (true only when the
    reference solution was in the prompt, i.e. configured and present).
    """
    n_steps = len(traj.proof_steps)
    prompt = verification_prompt(traj, with_reference=cfg.with_reference, template=cfg.template)
    used_ref = bool(cfg.with_reference and traj.reference_solution)
    return Item(traj.id, prompt, lambda c: _to_output(c, n_steps), traj.id,
                {"template": cfg.template, "with_reference": used_ref})


def _to_output(c: Completion, n_steps: int) -> VerificationOutput:
    return parse_completion(c.text, c.finish_reason, c.reasoning, n_steps, status=c.status, error=c.error)


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs ``(start, length)`` of sorted pass indices."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def _aggregable(outputs: Sequence[Any]) -> bool:
    return bool(outputs) and all(hasattr(o, "accepts") and hasattr(o, "first_error_step") for o in outputs)


async def judge_item(item: Item, submit: Submit, cfg: JudgeConfig, policy: AggregationPolicy,
                     sampling: SamplingConfig, fingerprint: str, cache: PassCache | None) -> Judgment:
    """The passes of one item: pass cache hits, then engine requests wave by wave (early stop)."""
    messages = as_messages(item.prompt)
    phash = hashlib.sha256(item.prompt.encode()).hexdigest()
    base = base_seed(item.seed_key or item.id, cfg.run_seed)
    plan = wave_plan(cfg.n, cfg.waves if cfg.early_stop else None)
    outputs: list[Any] = []
    completions: list[Completion] = []
    n_cached = 0
    status = "ok"
    for start, m in plan:
        wave: dict[int, Completion] = {}
        keys = {i: PassCache.key(fingerprint, phash, sampling, base + i, i) for i in range(start, start + m)}
        if cache is not None:
            for i, k in keys.items():
                c = cache.get(k)
                if c is not None:
                    wave[i] = c
                    n_cached += 1
        missing = [i for i in range(start, start + m) if i not in wave]
        for s, length in _runs(missing):
            got = await submit(GenerationRequest(messages, n=length, seed=base + s, key=item.id, model=cfg.model))
            if len(got) != length:
                got = [Completion(status="request_failed", error=f"expected {length} samples, got {len(got)}")] * length
            for j, c in enumerate(got):
                wave[s + j] = c
            if cache is not None:
                cache.put_many([(keys[s + j], c) for j, c in enumerate(got)])
        for i in range(start, start + m):
            completions.append(wave[i])
            outputs.append(item.parse(wave[i]))
        if any(c.status == "request_failed" for c in completions):
            status = "request_failed"
            break
        if any(c.status == "too_long" for c in completions):
            status = "too_long"
            break  # the same prompt is too long for every pass
        if len(outputs) < cfg.n and cfg.early_stop and _aggregable(outputs) and decided(outputs, policy):
            break
    agg = aggregate(outputs, policy) if _aggregable(outputs) else None
    return Judgment(
        id=item.id, aggregate=agg, passes=outputs, seeds=[base + i for i in range(len(outputs))],  # type: ignore[arg-type]
        completion_tokens=[c.completion_tokens for c in completions], status=status,
        early_stopped=status == "ok" and len(outputs) < cfg.n, policy=cfg.policy, n=cfg.n,
        model=fingerprint.split("|")[0], cached_passes=n_cached, completions=completions,
    )


def judge_trajectories(
    trajs: Sequence[ProofTrajectory],
    engine: Engine,
    cfg: JudgeConfig | None = None,
    cache: PassCache | None = None,
    on_judgment: Callable[[Judgment], None] | None = None,
    progress: bool = False,
) -> list[Judgment]:
    """Judge every trajectory with ``cfg.n`` passes under ``cfg.policy``; results in input order.

    In memory (nothing persisted): commands use ``verifier.runner.judge`` with an output file.
    Works with any ``Engine`` (``OpenAIEngine``: one shared client, each trajectory's next wave
    starts when its previous wave returns; batch engines such as ``VLLMOfflineEngine``: the
    requests ready at the same time form one batch). Check ``Judgment.complete`` before persisting.
    """
    from verifier.runner import judge

    res = judge(trajs, engine, cfg if cfg is not None else JudgeConfig(), None, cache=cache,
                on_judgment=on_judgment, progress=progress)
    return res.judgments  # type: ignore[return-value]
