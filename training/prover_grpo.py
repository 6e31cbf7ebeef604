"""GRPO training of a prover with the served verifier's acceptance as its reward: the recipe.

``accelerate launch training/grpo.py experiment=prover_rl output_dir=DIR [overrides]`` (``prover.enabled=true``:
``training/grpo.py`` hands the run to :func:`run`; docs/prover.md).

The same steps as the verifier's recipe (``training.recipe``: start-up checks, ``DIR/config.json``, W&B, the
trainer of every rank, ``DIR/train_summary.json``, ``DIR/metrics.json``) with the prover's own data, reward and
held-out evaluation, all from ``training.prover_reward``: problems, not trajectories (held-out problems disjoint
from training); the reward is the served verifier's acceptance (``prover.reward=verifier``, with its hack audit)
or the exact gold check (``prover.reward=gold``); the held-out evaluation is ProverBench on the saved prover,
judged by the served verifier, in ``DIR/heldout/``. A prover run writes no verifier card (its model is a prover).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training import recipe
from training.config import GRPORunConfig
from training.model import load_model
from training.prover_reward import build_prover_reward, evaluate_prover, load_problems, problem_rows
from training.prover_reward import summary as prover_summary
from training.trainer import grpo_trainer


def build_trainer(cfg: GRPORunConfig, out: Path, problems, report_wandb: bool = False, name: str | None = None):
    """(trainer, reward funcs, peft config or None, tokenizer): the prover's ``trl.GRPOTrainer``, not yet trained:
    one row per problem (``prover.template``), the prover reward (``training.prover_reward``)."""
    # lazy: datasets takes seconds to import; only a training run builds its rows
    from datasets import Dataset

    model, tokenizer, peft_config = load_model(cfg.model, cfg.init_from)
    dataset = Dataset.from_list(problem_rows(problems, cfg.prover.template))
    funcs, weights = build_prover_reward(cfg.prover)
    return grpo_trainer(cfg, out, model, tokenizer, peft_config, dataset, funcs, weights, report_wandb, name)


def reward_summary(funcs: list) -> dict[str, Any]:
    """The training summary's block of the prover reward (totals over all steps on this rank)."""
    return {"prover_reward": prover_summary(funcs)}


def run(cfg: GRPORunConfig) -> dict[str, Any]:
    """Train (unless ``train=false``) and evaluate one prover configuration; returns the metrics dict (main process)."""
    recipe.check(cfg)  # before anything is loaded or written; the prover's own checks (prover.*) too
    run = recipe.open_run(cfg)  # DIR/config.json, the run name, W&B
    train_problems, eval_problems = load_problems(cfg.prover, cfg.data)
    recipe.count(run, train_problems, eval_problems)
    if cfg.train:
        model_dir, _ = recipe.train(run, train_problems, build_trainer, reward_summary)
    else:
        model_dir = recipe.given_weights(run)
    metrics = {}
    if recipe.evaluates(run, eval_problems):  # held-out ProverBench on the saved prover
        metrics = evaluate_prover(cfg.prover, cfg.eval, run.out, eval_problems, model_dir, cfg.experiment_name)
    return recipe.finish(run, metrics)
