"""How a proof is judged: THE judge config, the wave plan, the pass cache (section 4.4).

``JudgeConfig`` (``verifier.config``) is THE judge config (Hydra group ``configs/judge/default.yaml``) of every command
that judges; the loop over records and passes, the JSONL output and resume live in ``verifier.runner``
(the one judging runner); the judgment record and its row in ``verifier.judgment``. In-memory use::

    from verifier.judging import JudgeConfig
    from verifier.runner import judge_trajectories
    judgments = judge_trajectories(trajs, engine, JudgeConfig(n=8, policy="pessimistic"))
    rows = [j.to_row() for j in judgments]          # the eval.judge JSONL format

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

import hashlib
import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from verifier.config import JudgeConfig  # noqa: F401 - THE judge config, imported from here by callers
from verifier.config import Sampling
from verifier.engine import Completion, Engine
from verifier.errors import InputError


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
    def key(model: str, prompt_hash: str, sampling: Sampling, seed: int, index: int) -> str:
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
