"""GRPO training of a prover with the served verifier's acceptance as its reward: the recipe.

``accelerate launch training/grpo.py experiment=prover_rl output_dir=DIR [overrides]`` (``prover.enabled=true``:
``training/grpo.py`` hands the run to :func:`run`; docs/prover.md).

The same steps as the verifier's recipe (``training.recipe``: start-up checks, ``DIR/config.json``, W&B, the
trainer of every rank, ``DIR/train_summary.json``, ``DIR/metrics.json``) with the prover's own data, reward and
held-out evaluation, all from ``training.prover_reward``: problems, not trajectories (held-out problems disjoint
from training); the reward is the served verifier's acceptance (``prover.reward=verifier``, with its hack audit)
or the exact gold check (``prover.reward=gold``); the held-out evaluation is ProverBench on the saved prover,
judged by the served verifier, in ``DIR/heldout/``. A prover run writes no verifier card (its model is a prover).
Its own parts of the start-up checks are :data:`CHECKS`: the problems files, their toy values, the verifiers it
calls and the ``prover.*`` values; Table 3's ``base``-row rule is the verifier's only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training import preflight, recipe
from training.config import GRPORunConfig
from training.model import load_model
from training.preflight import PreflightError
from training.prover_reward import build_prover_reward, evaluate_prover, load_problems, problem_rows, prover_toy_values
from training.prover_reward import summary as prover_summary
from training.scale import TOY_RECORDS, TOY_TOKENS, budget_toy_values
from training.trainer import grpo_trainer


def toy_values(cfg: GRPORunConfig) -> list[str]:
    """Every key of a prover run that carries a tiny-profile value: its problems and judge, then the GRPO budgets."""
    return prover_toy_values(cfg.prover, cfg.data, TOY_RECORDS, TOY_TOKENS) + budget_toy_values(cfg)


def data_files(cfg: GRPORunConfig) -> list[tuple[str, str]]:
    """(key, path) of the problems files a prover run reads (problems, not trajectories)."""
    p = cfg.prover
    return [(k, str(f)) for k, f in [("prover.problems", p.problems), ("prover.eval_problems", p.eval_problems)] if f]


def endpoints(cfg: GRPORunConfig) -> list[tuple[str, Any]]:
    """(key, EndpointConfig) of every server a prover run calls: the held-out evaluation's (``eval.engine=endpoint``),
    the verifier and its pool (the reward, the held-out judge), the hack audit's independent judges."""
    p, a = cfg.prover, cfg.prover.audit
    out = preflight.eval_endpoints(cfg)
    if (cfg.train and p.reward == "verifier") or cfg.eval.enabled:
        out.append(("prover.verifier", p.verifier))
        out += [(f"prover.pool.verifiers[{i}]", ep) for i, ep in enumerate(p.pool.verifiers)]
    if cfg.train and p.reward == "verifier" and a.every and a.judge == "pool":
        out += [(f"prover.audit.pool.verifiers[{i}]", ep) for i, ep in enumerate(a.pool.verifiers)]
    return out


def validate(cfg: GRPORunConfig) -> None:
    """The prover's own values (``prover.reward``, ``prover.policy``, ...; ``ProverRLConfig.validate``), said before
    anything loads instead of when the reward is built."""
    try:
        cfg.prover.validate()
    except ValueError as e:
        raise PreflightError(str(e)) from e


# the prover's start-up checks: problems files, the verifiers it calls, its own values; no Table 3 base row
CHECKS = recipe.Checks(toy_values=toy_values, data_files=data_files, endpoints=endpoints, validate=validate,
                       base_row=False)


def check_scale(cfg: GRPORunConfig) -> None:
    """Stop a real-model prover run that still has tiny-profile values (``training.scale``), before anything loads."""
    recipe.check_scale(cfg, CHECKS)


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
    recipe.check(cfg, CHECKS)  # before anything is loaded or written; the prover's own checks (prover.*) too
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
