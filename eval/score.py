"""Score verifier predictions against expert gold (VerifierBench Rough / Meta-Verification, ProcessBench).

``python -m eval.score gold=PATH predictions=PATH out=DIR [allow_missing=true] [meta_threshold=EXACT_MATCH]``

* ``gold``: our trajectory JSONL with annotations, a ProcessBench split (``.json``) or
  the OPC test parquet (``verifier.formats.load_gold``).
* ``predictions``: JSONL, one row per trajectory with ``id``, ``verdict`` (valid / invalid /
  null), ``first_error_step``, optionally ``meta_grade`` and ``passes`` (as ``eval.judge`` writes).

Writes ``DIR/metrics.json`` (flat metric keys ``rough.tpr``, ``rough.tnr``,
``rough.balanced_f1``, ``meta.*`` when grades are given, ``processbench.error_acc``,
``processbench.correct_acc``, ``processbench.f1``; each ``{"value", "counts", "ci"}``),
a Markdown report with PNG plots (``verifier.results``), and prints a table.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from eval.browse import write_browser_for_run
from eval.metrics import Alignment, Prediction, ScoreOptions, align_ids, score_predictions
from eval.stats import BOOTSTRAP_RENAMED, BootstrapSpec
from verifier.config import hydra_main
from verifier.formats import load_gold
from verifier.io import DatasetError, load_records
from verifier.records import MetaGrade, ProofTrajectory
from verifier.results import WandbConfig, log_eval, print_table, write_metrics, write_report


@dataclass
class ScoreConfig:
    """``python -m eval.score`` (mirrored by ``configs/score.yaml``)."""

    gold: str = "???"
    predictions: str = "???"
    out: str = "???"
    allow_missing: bool = False
    meta_threshold: str = "BASIC_MATCH"
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)  # CI: replicates, seed, level
    RENAMED: ClassVar[dict[str, str]] = BOOTSTRAP_RENAMED  # old keys keep working (verifier.config.renamed)
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
        bootstrap=cfg.bootstrap,
        breakdowns=tuple(cfg.breakdowns),
    )


def run(cfg: ScoreConfig) -> dict[str, Any]:
    """Score, write metrics.json (+ report, plots, W&B), print the table; returns the document."""
    doc, gold, preds = score_files(cfg.gold, cfg.predictions, options(cfg), cfg.allow_missing)
    doc["inputs"] = {"gold": str(cfg.gold), "predictions": str(cfg.predictions)}
    doc["config"] = asdict(cfg)
    path = write_metrics(cfg.out, doc)
    print_table(doc, cfg.title or "VerifierBench scores")
    if cfg.report:
        browser_index = cfg.browser_index
        if browser_index is None:  # every report links the judgment browser of its predictions

            browser_index = write_browser_for_run(cfg.predictions, gold, Path(cfg.out) / "browser",
                                                  title=f"Judgments: {Path(cfg.predictions).name}")
        write_report(cfg.out, doc, title=cfg.title or f"Scores of {Path(cfg.predictions).name}",
                     browser_index=browser_index)
    if cfg.wandb.enabled:
        log_eval(cfg.out, doc, cfg=asdict(cfg), wandb_cfg=cfg.wandb, gold=gold, preds=preds)
    print(f"wrote {path}")
    return doc


def main() -> None:
    hydra_main("score", ScoreConfig)(run)()


if __name__ == "__main__":
    main()
