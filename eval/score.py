"""Score verifier predictions against expert gold (VerifierBench Rough / Meta-Verification, ProcessBench).

``python -m eval.score gold=PATH predictions=PATH out=DIR [allow_missing=true] [meta_threshold=EXACT_MATCH]``

* ``gold``: our trajectory JSONL with annotations, a ProcessBench split (``.json``) or
  the OPC test parquet (``data_pipeline.importers.load_any``).
* ``predictions``: JSONL, one row per trajectory with ``id``, ``verdict`` (valid / invalid /
  null), ``first_error_step``, optionally ``meta_grade`` and ``passes`` (as ``eval.judge`` writes).

Writes ``DIR/metrics.json`` (flat metric keys ``rough.tpr``, ``rough.tnr``,
``rough.balanced_f1``, ``meta.*`` when grades are given, ``processbench.error_acc``,
``processbench.correct_acc``, ``processbench.f1``; each ``{"value", "counts", "ci"}``),
a Markdown report with PNG plots (``eval.report``), and prints a table.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eval.metrics import METRICS, Alignment, Prediction, ScoreOptions, align_ids, fmt_pct, score_predictions
from eval.stats import BootstrapSpec
from verifier.io import DatasetError, load_records
from verifier.records import MetaGrade, ProofTrajectory, RecordError


@dataclass
class WandbConfig:
    """W&B logging (``eval.wandb_log``); offline unless WANDB_API_KEY is set and mode is not forced."""

    enabled: bool = True
    project: str = "proofverifier-eval"
    entity: str | None = None
    name: str | None = None
    mode: str | None = None  # online | offline | disabled; default: offline without WANDB_API_KEY
    dir: str | None = None  # default: <out>/wandb
    tags: list[str] = field(default_factory=list)


@dataclass
class ScoreConfig:
    """``python -m eval.score`` (mirrored by ``configs/score.yaml``)."""

    gold: str = "???"
    predictions: str = "???"
    out: str = "???"
    allow_missing: bool = False
    meta_threshold: str = "BASIC_MATCH"
    bootstrap_n: int = 1000
    bootstrap_seed: int = 0
    ci_level: float = 0.95
    breakdowns: list[str] = field(default_factory=lambda: ["split", "subject"])
    report: bool = True  # Markdown report + PNG plots next to metrics.json
    title: str | None = None
    browser_index: str | None = None  # link the judgment browser page from the report (eval.browse)
    wandb: WandbConfig = field(default_factory=lambda: WandbConfig(enabled=False))


def load_predictions(path: str | os.PathLike) -> dict[str, Prediction]:
    """Read a predictions JSONL; every bad row is reported (id, field, line); duplicate ids are errors."""
    records, errors = load_records(path, Prediction.from_dict)
    if errors:
        raise DatasetError(path, errors)
    return {p.id: p for p in records}


def load_gold(path: str | os.PathLike) -> list[ProofTrajectory]:
    """Gold records via ``load_any``; every record must carry an expert annotation."""
    from data_pipeline.importers import load_any

    records = load_any(path).records
    bad = [RecordError(r.id, "annotation", "gold record has no expert annotation") for r in records
           if r.annotation is None]
    if bad:
        raise DatasetError(path, bad)
    return records


def score_files(gold_path: str | os.PathLike, pred_path: str | os.PathLike, opts: ScoreOptions,
                allow_missing: bool = False) -> tuple[dict[str, Any], list[ProofTrajectory], dict[str, Prediction]]:
    """Load, align ids and score; returns (metrics document, gold, predictions)."""
    gold = load_gold(gold_path)
    preds = load_predictions(pred_path)
    al: Alignment = align_ids([g.id for g in gold], list(preds), allow_missing)
    result = score_predictions(gold, preds, opts)
    return flatten(result, al), gold, preds


def flatten(result: dict[str, Any], alignment: Alignment | None = None) -> dict[str, Any]:
    """The metrics.json document: metric keys at the top level, then the details."""
    doc: dict[str, Any] = dict(result["metrics"])
    for k, v in result.items():
        if k != "metrics":
            doc[k] = v
    if alignment is not None:
        doc["ids"] = alignment.to_dict()
    return doc


def options(cfg: ScoreConfig) -> ScoreOptions:
    return ScoreOptions(
        meta_threshold=MetaGrade.parse(cfg.meta_threshold, None, "meta_threshold"),
        bootstrap=BootstrapSpec(n=cfg.bootstrap_n, seed=cfg.bootstrap_seed, level=cfg.ci_level),
        breakdowns=tuple(cfg.breakdowns),
    )


def print_table(doc: dict[str, Any], title: str = "VerifierBench scores") -> None:
    """Headline metrics as a rich table (percentages with 95% CIs and counts)."""
    from rich.console import Console
    from rich.table import Table

    level = int(round(100 * doc.get("bootstrap", {}).get("level", 0.95)))
    t = Table(title=f"{title} (n={doc.get('n')}, {level}% CI over problems)")
    t.add_column("metric")
    t.add_column("value %", justify="right")
    t.add_column(f"{level}% CI", justify="right")
    t.add_column("counts")
    for name in METRICS:
        if name not in doc:
            continue
        m = doc[name]
        ci = m.get("ci")
        ci_s = "—" if not ci or ci[0] is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
        t.add_row(name, fmt_pct(m, ci=False), ci_s, " ".join(f"{k}={v}" for k, v in m["counts"].items()))
    Console(width=120).print(t)
    ids = doc.get("ids") or {}
    if ids.get("missing_predictions") or ids.get("unknown_predictions"):
        print(f"ids: {len(ids['missing_predictions'])} gold id(s) without a prediction, "
              f"{len(ids['unknown_predictions'])} prediction id(s) not in gold (allow_missing=true)")


def write_metrics(out: str | os.PathLike, doc: dict[str, Any]) -> Path:
    path = Path(out) / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def run(cfg: ScoreConfig) -> dict[str, Any]:
    """Score, write metrics.json (+ report, plots, W&B), print the table; returns the document."""
    doc, gold, preds = score_files(cfg.gold, cfg.predictions, options(cfg), cfg.allow_missing)
    doc["inputs"] = {"gold": str(cfg.gold), "predictions": str(cfg.predictions)}
    doc["config"] = asdict(cfg)
    path = write_metrics(cfg.out, doc)
    print_table(doc, cfg.title or "VerifierBench scores")
    if cfg.report:
        from eval.report import write_report

        browser_index = cfg.browser_index
        if browser_index is None:  # every report links the judgment browser of its predictions
            from eval.browse import write_browser_for_run

            browser_index = write_browser_for_run(cfg.predictions, gold, Path(cfg.out) / "browser",
                                                  title=f"Judgments: {Path(cfg.predictions).name}")
        write_report(cfg.out, doc, title=cfg.title or f"Scores of {Path(cfg.predictions).name}",
                     browser_index=browser_index)
    if cfg.wandb.enabled:
        from eval.wandb_log import log_eval

        log_eval(cfg.out, doc, cfg=asdict(cfg), wandb_cfg=cfg.wandb, gold=gold, preds=preds)
    print(f"wrote {path}")
    return doc


def main() -> None:
    from verifier.config import hydra_main

    hydra_main("score", ScoreConfig)(run)()


if __name__ == "__main__":
    main()
