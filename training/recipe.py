"""The steps every GRPO recipe shares: the verifier's (``training/grpo.py``) and the prover's
(``training/prover_grpo.py``) call them in the same order and differ only in their data, reward and
held-out evaluation.

:func:`check` (before anything loads: model path, scale, ladder rules, the recipe's own values, vLLM configs and
endpoints; each recipe names its own parts in a :class:`Checks`) ->
:func:`open_run` (the run's folder, ``config.json``, its name, computed once, and its W&B run) -> the recipe
loads its data -> :func:`count` (the held-out side is not empty) -> :func:`train` (every rank, ``training.trainer``;
the main process writes ``train_log.json`` and ``train_summary.json``) or :func:`given_weights` (a run that trains
nothing) -> the recipe's held-out evaluation when :func:`evaluates` -> :func:`finish` (``metrics.json``, W&B).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

from training import ladder, preflight, trainer
from training.config import GRPORunConfig
from training.model import ensure_model
from training.scale import raise_on_toy_values
from training.tracking import init_wandb, run_name
from verifier.config import redact
from verifier.errors import InputError
from verifier.results import flat_metrics, write_metrics

log = logging.getLogger("training.recipe")


@dataclass
class Run:
    """One run of a recipe: its folder, its name (W&B, TRL, the summaries), whether this is the main process,
    its W&B run (None: off, or another rank) and the summary that ``train_summary.json`` and ``metrics.json`` carry."""

    cfg: GRPORunConfig
    out: Path
    name: str
    is_main: bool
    wandb: Any = None
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Checks:
    """A recipe's own parts of the start-up checks; the shared rest is ``training.scale``'s, ``training.ladder``'s
    and ``training.preflight``'s."""

    toy_values: Callable[[GRPORunConfig], list[str]]  # every tiny-profile value, with the reason (training.scale)
    data_files: Callable[[GRPORunConfig], list[tuple[str, str]]]  # (key, path) of every data file the run reads
    endpoints: Callable[[GRPORunConfig], list[tuple[str, Any]]]  # (key, EndpointConfig) of every server it calls
    validate: Callable[[GRPORunConfig], None] | None = None  # its own values, checked before the vLLM configs
    base_row: bool = True  # the rule of Table 3's base row applies (training.ladder.check_base_model)


def check_scale(cfg: GRPORunConfig, checks: Checks) -> None:
    """Stop a real-model run that still has tiny-profile values, before loading data or the model."""
    ladder.resolve_data(cfg)  # data.root -> the row's own data.train_path / data.eval_path
    raise_on_toy_values(cfg.init_from or cfg.model.name_or_path, checks.toy_values(cfg), smoke=cfg.smoke)


def check_launch(cfg: GRPORunConfig, checks: Checks) -> None:
    """The checks a sweep job makes before it starts the run's processes: scale and ladder rules."""
    check_scale(cfg, checks)
    ladder.prepare(cfg, checks.data_files, checks.base_row)


def check_configs(cfg: GRPORunConfig, checks: Checks, endpoints_too: bool | None = None) -> dict[str, Any]:
    """The recipe's own values, then its vLLM configs and served endpoints (``training.preflight.check``)."""
    if checks.validate is not None:
        checks.validate(cfg)
    return preflight.check(cfg, endpoints_too, checks.endpoints)


def check(cfg: GRPORunConfig, checks: Checks) -> None:
    """Every start-up check of a recipe, before anything is loaded or written."""
    preflight.check_model(cfg)  # a mistyped model path is said as such, not as a real model with toy values
    check_launch(cfg, checks)  # a real model with tiny values; per-variant data, data files (training/ladder.py)
    check_configs(cfg, checks)  # the recipe's own values, vLLM configs and served endpoints (training/preflight.py)


def open_run(cfg: GRPORunConfig) -> Run:
    """The run's folder with its ``config.json`` (redacted), its name and, on the main process, its W&B run."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(redact(cfg), indent=1, default=str))
    is_main = int(os.environ.get("RANK", "0")) == 0
    name = run_name(cfg)
    return Run(cfg, out, name, is_main, init_wandb(cfg, out, is_main, name),
               {"experiment": cfg.experiment_name, "run_name": name})


def count(run: Run, train_items: Sequence[Any], eval_items: Sequence[Any]) -> None:
    """Log and record how many training and held-out items the run has; no held-out item with the evaluation
    on stops the run (it would write no metrics)."""
    cfg = run.cfg
    log.info("%s: %d training and %d held-out trajectories", cfg.experiment_name, len(train_items), len(eval_items))
    if cfg.eval.enabled and not eval_items:
        raise ladder.LadderConfigError(f"{cfg.experiment_name}: no held-out trajectories (data.eval_path="
                                       f"{cfg.data.eval_path}); the run would write no metrics. Fix the data or "
                                       f"set eval.enabled=false")
    run.summary.update(n_train=len(train_items), n_eval=len(eval_items))


def train(run: Run, train_items: Sequence[Any], build: Callable[..., tuple],
          reward_summary: Callable[[list], dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """GRPO on every rank (``training.trainer.train``) with the trainer ``build(cfg, out, train_items,
    report_wandb=..., name=...)`` makes; the main process writes ``train_log.json`` and ``train_summary.json``
    (always, also with ``eval.enabled=false``: reward-judge counts, grades, steps). Returns the final weights'
    directory and the log history."""
    if not train_items:
        raise InputError("no training trajectories (check data.source / data.train_path)")
    tsum = trainer.train(run.cfg, run.out, partial(build, run.cfg, run.out, train_items, name=run.name), run.wandb,
                         reward_summary)  # every rank; the final weights are on disk when it returns
    run.summary["train"] = {k: v for k, v in tsum.items() if k != "log_history"}
    if run.is_main:
        (run.out / "train_log.json").write_text(json.dumps(tsum["log_history"], indent=1))
        (run.out / "train_summary.json").write_text(json.dumps(run.summary, indent=1, default=str))
    return tsum["final"], tsum["log_history"]


def given_weights(run: Run) -> str:
    """The weights a run that trains nothing evaluates: another row's final weights (``evaluate_run``, the
    ``pess_ver`` row, waiting for that run to finish) or the initial model as it is (the ``base`` row)."""
    cfg = run.cfg
    if cfg.evaluate_run:
        model_dir = str(ladder.wait_for_run(cfg.evaluate_run, cfg.evaluate_run_wait_s))
        run.summary["evaluated_run"] = {"dir": str(cfg.evaluate_run), "weights": model_dir}
        return model_dir
    return ensure_model(cfg.init_from or cfg.model.name_or_path)


def evaluates(run: Run, eval_items: Sequence[Any]) -> bool:
    """The held-out evaluation runs on the main process only (after all ranks finished), when it is on."""
    return bool(run.cfg.eval.enabled and eval_items and run.is_main)


def finish(run: Run, metrics: dict[str, Any]) -> dict[str, Any]:
    """Write the held-out metrics (with the run's summary) to ``metrics.json`` and W&B, close W&B; returns them."""
    if metrics:
        metrics["run"] = run.summary
        write_metrics(run.out, metrics)
        if run.wandb is not None:
            flat = {f"eval/{k}": v for k, v in flat_metrics(metrics).items()
                    if not k.startswith(("config/", "eval_config/", "inputs/", "ids/"))}
            run.wandb.log(flat)
            run.wandb.summary.update(flat)
    if run.wandb is not None:
        run.wandb.finish()
    print(f"wrote {run.out}", flush=True)
    return metrics
