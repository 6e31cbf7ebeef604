"""Batch judge command (section 4.4): n passes per proof on a served verifier, aggregated, resumable.

``python -m eval.judge input=PATH output=PATH endpoint.base_url=URL
endpoint.model=NAME judge.n=8 judge.policy=pessimistic judge.early_stop=false``

* ``input``: our trajectory JSONL, a ProcessBench split (``.json``) or the OPC parquet
  (``verifier.formats.load_any``); ``on_error=skip`` skips bad JSONL records (counted, reported).
* ``output``: JSONL, one line per trajectory (``verifier.judgment.Judgment.to_row``), appended and
  fsynced as each judgment completes (``verifier.runner.judge``, the one judging runner). Re-running the same command resumes: ids already in the
  output are skipped, passes already generated come from the pass cache (``cache``, default
  ``<output>.cache.sqlite``), so nothing is judged twice and no line is duplicated.
* Judgments whose requests failed (server down after retries) are not written; the command
  then exits with status 1 and says to re-run it.
* The API key comes from the environment variable ``endpoint.api_key_env`` names (default
  ``$VERIFIER_API_KEY``, then ``$OPENAI_API_KEY``); it is never logged and never written. One writer:
  the run holds the lock of ``output`` (``verifier.outputs``); a second run on it stops at once.
  See docs/operations.md.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from verifier.card import inherit
from verifier.config import EndpointConfig, hydra_main
from verifier.engine import OpenAIEngine, served_models
from verifier.errors import InputError
from verifier.formats import load_any
from verifier.judging import JudgeConfig, PassCache
from verifier.judgment import Judgment
from verifier.outputs import holds_output
from verifier.runner import done_ids, judge

log = logging.getLogger("eval.judge")


@dataclass
class JudgeAppConfig:
    """Schema of ``configs/judge.yaml``."""

    input: str = "???"
    output: str = "???"
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    cache: str | None = None  # pass cache (SQLite); default <output>.cache.sqlite; "none" disables
    on_error: str = "raise"  # bad input records: raise | skip (skipped records are counted and reported)
    limit: int | None = None  # judge only the first N input records
    progress: bool = True
    verifier_run_dir: str | None = None  # a training run: judge keys not on the command line from its verifier card

    def resolve(self, given: frozenset[str]) -> JudgeAppConfig:
        """The verifier card of ``verifier_run_dir`` fills the judge keys not given (``verifier.card.inherit``)."""
        return inherit(self, given, endpoint="endpoint")


@holds_output("output", folder=False)
def run(cfg: JudgeAppConfig) -> dict[str, Any]:
    """Judge ``cfg.input`` into ``cfg.output`` (``verifier.runner.judge``); returns the summary (also printed)."""
    if cfg.input in ("???", "") or cfg.output in ("???", ""):
        raise InputError("input=PATH and output=PATH are required")
    t0 = time.monotonic()
    loaded = load_any(cfg.input, on_error=cfg.on_error)
    for e in loaded.errors:
        log.warning("skipped input record: %s", e)
    trajs = loaded.records[: cfg.limit] if cfg.limit is not None else loaded.records
    out = Path(cfg.output)
    cache = None
    if (cfg.cache or "").lower() != "none":
        cache = PassCache(cfg.cache or str(out) + ".cache.sqlite")
    already = done_ids(out) & {t.id for t in trajs}
    print(f"judge: {len(trajs)} proofs from {cfg.input} (skipped {loaded.skipped} bad records), "
          f"{len(already)} already in {out}, {len(trajs) - len(already)} to judge "
          f"(model {cfg.judge.model or cfg.endpoint.model}, n={cfg.judge.n}, {cfg.judge.policy}, "
          f"early_stop={cfg.judge.early_stop})", flush=True)
    check_served_model(cfg.endpoint)
    warned = [0]
    no_verdict: dict[str, int] = {}  # proofs none of whose passes gave a verdict, by the passes' parse status

    def warn_failed(j: Judgment) -> None:
        if j.complete and j.passes and not any(p.ok for p in j.passes):
            for p in j.passes:
                no_verdict[p.status.value] = no_verdict.get(p.status.value, 0) + 1
            no_verdict["proofs"] = no_verdict.get("proofs", 0) + 1
        if not j.complete and warned[0] < 3:
            warned[0] += 1
            log.warning("proof %s not judged: %s", j.id, j.passes[-1].detail if j.passes else "no passes")

    try:
        res = judge(trajs, OpenAIEngine(cfg.endpoint), cfg.judge, out, cache=cache, on_judgment=warn_failed,
                    progress=cfg.progress)
    finally:
        if cache is not None:
            cache.close()
    s = res.summary
    summary = {"input": len(trajs), "skipped_input": loaded.skipped, "resumed": s["already_done"] > 0,
               "already_done": s["already_done"], **{k: s[k] for k in (
                   "written", "failed", "too_long", "early_stopped", "generated_passes", "cached_passes", "tokens",
                   "truncated_passes", "unclosed_thinking_passes")},
               "status": s["status"], "pass_status": s["pass_status"], "no_verdict": no_verdict.get("proofs", 0),
               "seconds": round(time.monotonic() - t0, 2)}
    print("judge summary: " + " ".join(f"{k}={_fmt(v)}" for k, v in summary.items()), flush=True)
    if no_verdict:
        why = ", ".join(f"{k}:{v}" for k, v in no_verdict.items() if k != "proofs")
        print(f"judge: {no_verdict['proofs']} proofs got no verdict from any of their {cfg.judge.n} passes "
              f"(pass status {why}); they count as rejected. Raise judge.max_tokens / endpoint.max_tokens or check "
              f"the served model's output format", file=sys.stderr, flush=True)
    if s["failed"]:
        print(f"judge: {s['failed']} proofs not judged (request failures, see log); "
              "re-run the same command to resume", file=sys.stderr, flush=True)
    return summary


def check_served_model(endpoint: EndpointConfig) -> None:
    """A server that answers ``GET /models`` must serve ``endpoint.model``; else an error listing what it serves.

    A server that does not answer is left to the run (its requests fail, are counted and the command says
    to re-run it).
    """

    for url in endpoint.urls:
        try:
            models = served_models(url, endpoint.resolved_api_key())
        except (requests.RequestException, ValueError):
            continue
        if endpoint.model not in models:
            raise ValueError(f"endpoint.model={endpoint.model!r} is not served at {url}; it serves: "
                             f"{', '.join(map(str, models)) or 'nothing'}")


def _fmt(v: Any) -> str:
    return ",".join(f"{k}:{n}" for k, n in v.items()) if isinstance(v, dict) else str(v)


def main() -> None:
    @hydra_main("judge", JudgeAppConfig)
    def _run(cfg: JudgeAppConfig) -> None:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        summary = run(cfg)
        if summary["failed"]:
            sys.exit(1)

    _run()


if __name__ == "__main__":
    main()
