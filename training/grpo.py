"""GRPO training of a proof verifier with meta-verifier rewards (section 4.3, Table 3): the recipe.

``accelerate launch training/grpo.py experiment=NAME output_dir=DIR [overrides]``
(or ``python training/grpo.py ...``; ``-m experiment=base,rough_rl,...`` sweeps the ladder).

Hydra config (``configs/grpo.yaml``, schema :class:`training.config.GRPORunConfig`) -> scale check
(``training.scale``), ladder rules (``training.ladder``) and preflight (``training.preflight``), before
anything loads -> trajectories (``training.data``) -> W&B (``training.tracking``) -> on every rank the
``trl.GRPOTrainer`` with the rewards of ``training/rewards.py`` (``training.trainer``), the final weights saved
to ``DIR/final`` (``training.model``; LoRA: the adapter there and a merged copy in ``DIR/final_merged``), the
verifier card beside them (``DIR/verifier_card.json``, ``verifier.card``: how the verifier is to be judged) ->
on the main process, after all ranks finished, the held-out evaluation (``training.heldout``: the
VerifierBench path, ``eval.verifierbench.run``), in ``DIR/heldout/``; its metrics go to ``DIR/metrics.json``.
The steps both GRPO recipes share are ``training.recipe``'s; a prover configuration (``experiment=prover_rl``,
``prover.enabled=true``) runs the prover's recipe, ``training/prover_grpo.py``.

A submitit sweep job (``-m hydra/launcher=slurm|slurm_local``) runs its configuration through
``accelerate launch`` instead (``launch.jobs``).

Generation runs in-process (CPU, small GPUs) or through TRL's vLLM modes
(``grpo.use_vllm=true grpo.vllm_mode=server|colocate``). Checkpoints are written under
``output_dir``; ``resume=true`` continues from the last one and logs its name.
W&B: run name from the experiment and the overrides, the whole config logged, the
completions table with the meta-verifier's grade and rationale; offline when no key is set.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `accelerate launch training/grpo.py` puts training/ first on the path
    sys.path.insert(0, str(REPO))

from launch.jobs import launch_job, submitit_launcher
from training import ladder, preflight, prover_grpo, recipe, scale
from training.config import GRPORunConfig
from training.data import load_trajectories_for
from training.heldout import evaluate_heldout
from training.trainer import build_trainer, meta_reward_summary
from verifier.card import VerifierCard, write_card
from verifier.config import hydra_main

log = logging.getLogger("training.grpo")

# the verifier's start-up checks: trajectories, the meta-verifier and held-out endpoints, Table 3's base row
CHECKS = recipe.Checks(toy_values=scale.toy_values, data_files=ladder.data_files, endpoints=preflight.endpoints)


def check_scale(cfg: GRPORunConfig) -> None:
    """Stop a real-model verifier run that still has tiny-profile values (``training.scale``), before anything loads."""
    recipe.check_scale(cfg, CHECKS)


def needed_tokens(log_history: list[dict[str, Any]], budget: int) -> int:
    """The least judge budget of a trained verifier: the longest verification it finished in the second half of
    training (TRL's ``completions/max_terminated_length`` per logging step); the whole budget when none finished.

    >>> key = "completions/max_terminated_length"
    >>> needed_tokens([{key: 900.0}, {"loss": 1.0}, {key: 0.0}, {key: 610.4}], 1024), needed_tokens([{key: 0.0}], 32)
    (611, 32)
    """
    seen = [float(h["completions/max_terminated_length"]) for h in log_history
            if "completions/max_terminated_length" in h]
    longest = max(seen[len(seen) // 2:], default=0.0)
    return min(budget, math.ceil(longest)) if longest > 0 else budget


def verifier_card(cfg: GRPORunConfig, log_history: list[dict[str, Any]]) -> VerifierCard:
    """The card of the trained verifier (``verifier.card``): prompt ``data.*``, budgets ``grpo.max_completion_length``
    and ``eval.judge.max_tokens``, the held-out judge's sampling, the policy's chat-template arguments."""
    kw = dict(cfg.grpo.chat_template_kwargs or {})
    budget = cfg.grpo.max_completion_length
    return VerifierCard(recipe="grpo", base_model=str(cfg.init_from or cfg.model.name_or_path),
                        template=cfg.data.prompt_template, with_reference=cfg.data.with_reference,
                        train_max_tokens=budget, needed_max_tokens=needed_tokens(log_history, budget),
                        judge_max_tokens=cfg.eval.judge.max_tokens, temperature=cfg.eval.judge.temperature,
                        top_p=cfg.eval.judge.top_p,
                        thinking=bool(kw["enable_thinking"]) if "enable_thinking" in kw else ladder.thinking_policy(cfg),
                        chat_template_kwargs=kw or None)


def run(cfg: GRPORunConfig) -> dict[str, Any]:
    """Train (unless ``train=false``) and evaluate one configuration; returns the metrics dict (main process)."""
    if cfg.prover.enabled:  # prover GRPO is its own recipe (training/prover_grpo.py): the one prover branch here
        return prover_grpo.run(cfg)
    recipe.check(cfg, CHECKS)  # before anything is loaded or written (training.recipe)
    run = recipe.open_run(cfg)  # DIR/config.json, the run name, W&B
    train_trajs, eval_trajs = load_trajectories_for(cfg.data)
    recipe.count(run, train_trajs, eval_trajs)
    if cfg.train:
        model_dir, log_history = recipe.train(run, train_trajs, build_trainer, meta_reward_summary)
        if run.is_main:
            write_card(run.out, verifier_card(cfg, log_history))
    else:  # pess_ver: another row's final weights; base: the initial model as it is
        model_dir = recipe.given_weights(run)
    metrics = evaluate_heldout(cfg, run.out, eval_trajs, model_dir) if recipe.evaluates(run, eval_trajs) else {}
    return recipe.finish(run, metrics)


def _hydra_overrides() -> list[str]:
    try:

        return list(HydraConfig.get().overrides.task)
    except Exception:  # not under a Hydra app (compose() in tests)
        return []


def main() -> None:
    @hydra_main("grpo", GRPORunConfig)
    def _main(cfg: GRPORunConfig) -> None:
        cfg.overrides = _hydra_overrides()
        launcher = submitit_launcher()
        if launcher is not None:  # a sweep job: the same run, started by accelerate with the configured file
            # fail in the job before starting processes, with the configuration's recipe's checks
            recipe.check_launch(cfg, prover_grpo.CHECKS if cfg.prover.enabled else CHECKS)
            launch_job(cfg, launcher)
            return
        run(cfg)

    _main()


if __name__ == "__main__":
    main()
