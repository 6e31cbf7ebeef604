"""Batch judge command (section 4.4): n passes per proof on a served verifier, aggregated, resumable.

``python -m eval.judge input=PATH output=PATH endpoint.base_url=URL endpoint.api_key=KEY
endpoint.model=NAME judge.n=8 judge.policy=pessimistic judge.early_stop=false``

* ``input``: our trajectory JSONL, a ProcessBench split (``.json``) or the OPC parquet
  (``data_pipeline.importers.load_any``); ``on_error=skip`` skips bad JSONL records (counted, reported).
* ``output``: JSONL, one line per trajectory (``verifier.judging.judgment_to_row``), appended and
  fsynced as each judgment completes. Re-running the same command resumes: ids already in the
  output are skipped, passes already generated come from the pass cache (``cache``, default
  ``<output>.cache.sqlite``), so nothing is judged twice and no line is duplicated.
* Judgments whose requests failed (server down after retries) are not written; the command
  then exits with status 1 and says to re-run it.
* The API key comes from ``endpoint.api_key`` or ``$VERIFIER_API_KEY``; it is never logged and
  never written (Hydra writes no config copy: ``hydra.output_subdir: null``).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.engine import EndpointConfig, OpenAIEngine
from verifier.io import JsonlAppender, iter_jsonl
from verifier.judging import JudgeConfig, Judgment, PassCache, judge_trajectories, judgment_to_row
from verifier.records import RecordError

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


def done_ids(path: Path) -> set[str]:
    """Ids already judged in an output file (a half-written last line is ignored; the appender drops it)."""
    ids: set[str] = set()
    if not path.exists():
        return ids
    for n, obj in iter_jsonl(path):
        if isinstance(obj, RecordError) or not isinstance(obj, dict) or "id" not in obj:
            continue  # only a torn last line can be bad; JsonlAppender truncates it
        ids.add(str(obj["id"]))
    return ids


def run(cfg: JudgeAppConfig) -> dict[str, Any]:
    """Judge ``cfg.input`` into ``cfg.output``; returns the summary (also printed)."""
    from data_pipeline.importers import load_any

    if cfg.input in ("???", "") or cfg.output in ("???", ""):
        raise ValueError("input=PATH and output=PATH are required")
    t0 = time.monotonic()
    loaded = load_any(cfg.input, on_error=cfg.on_error)
    for e in loaded.errors:
        log.warning("skipped input record: %s", e)
    trajs = loaded.records[: cfg.limit] if cfg.limit is not None else loaded.records
    out = Path(cfg.output)
    appender = JsonlAppender(out)  # truncates a torn last line before we read the ids
    try:
        already = done_ids(out)
        todo = [t for t in trajs if t.id not in already]
        cache = None
        if (cfg.cache or "").lower() != "none":
            cache = PassCache(cfg.cache or str(out) + ".cache.sqlite")
        engine = OpenAIEngine(cfg.endpoint)
        counts = {"written": 0, "failed": 0, "too_long": 0, "generated_passes": 0, "cached_passes": 0, "tokens": 0,
                  "truncated_passes": 0, "unclosed_thinking_passes": 0}  # budget hit / ended inside <think>

        def persist(j: Judgment) -> None:
            if not j.complete:
                counts["failed"] += 1
                if counts["failed"] <= 3:
                    log.warning("proof %s not judged: %s", j.id, j.passes[-1].detail if j.passes else "no passes")
                return
            appender.write(judgment_to_row(j))
            counts["written"] += 1
            counts["too_long"] += j.status == "too_long"
            counts["truncated_passes"] += sum(p.status.value == "truncated" for p in j.passes)
            counts["unclosed_thinking_passes"] += sum(p.status.value == "unclosed_thinking" for p in j.passes)
            counts["cached_passes"] += j.cached_passes
            counts["generated_passes"] += len(j.passes) - j.cached_passes
            counts["tokens"] += j.tokens

        print(f"judge: {len(trajs)} proofs from {cfg.input} (skipped {loaded.skipped} bad records), "
              f"{len(already & {t.id for t in trajs})} already in {out}, {len(todo)} to judge "
              f"(model {cfg.judge.model or cfg.endpoint.model}, n={cfg.judge.n}, {cfg.judge.policy}, "
              f"early_stop={cfg.judge.early_stop})", flush=True)
        judge_trajectories(todo, engine, cfg.judge, cache=cache, on_judgment=persist, progress=cfg.progress)
        if cache is not None:
            cache.close()
    finally:
        appender.close()
    summary = {"input": len(trajs), "skipped_input": loaded.skipped, "resumed": len(todo) < len(trajs),
               "already_done": len(trajs) - len(todo), **counts, "seconds": round(time.monotonic() - t0, 2)}
    print("judge summary: " + " ".join(f"{k}={v}" for k, v in summary.items()), flush=True)
    if counts["failed"]:
        print(f"judge: {counts['failed']} proofs not judged (request failures, see log); "
              "re-run the same command to resume", file=sys.stderr, flush=True)
    return summary


def main() -> None:
    from verifier.config import hydra_main

    @hydra_main("judge", JudgeAppConfig)
    def _run(cfg: JudgeAppConfig) -> None:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        summary = run(cfg)
        if summary["failed"]:
            sys.exit(1)

    _run()


if __name__ == "__main__":
    main()
