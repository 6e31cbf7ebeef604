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

A submitit sweep job (``-m hydra/launcher=slurm|slurm_local``) runs its configuration through
``accelerate launch`` instead (``launch.jobs``).

Generation runs in-process (CPU, small GPUs) or through TRL's vLLM modes
(``grpo.use_vllm=true grpo.vllm_mode=server|colocate``). Checkpoints are written under
``output_dir``; ``resume=true`` continues from the last one and logs its name.
W&B: run name from the experiment and the overrides, the whole config logged, the
completions table with the meta-verifier's grade and rationale; offline when no key is set.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `accelerate launch training/grpo.py` puts training/ first on the path
    sys.path.insert(0, str(REPO))

from launch.jobs import launch_job, submitit_launcher
from training import ladder, preflight
from training.config import GRPORunConfig
from training.data import load_trajectories_for
from training.heldout import evaluate_heldout
from training.model import ensure_model
from training.prover_reward import evaluate_prover, load_problems
from training.scale import raise_on_toy_values, toy_values
from training.tracking import init_wandb, run_name
from training.trainer import train
from verifier.card import VerifierCard, write_card
from verifier.config import hydra_main, redact
from verifier.errors import InputError
from verifier.results import flat_metrics, write_metrics

log = logging.getLogger("training.grpo")


def check_scale(cfg: GRPORunConfig) -> None:
    """Stop a real-model run that still has tiny-profile values, before loading data or the model."""
    ladder.resolve_data(cfg)  # data.root -> the row's own data.train_path / data.eval_path
    raise_on_toy_values(cfg.init_from or cfg.model.name_or_path, toy_values(cfg), smoke=cfg.smoke)


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
    preflight.check_model(cfg)  # a mistyped model path is said as such, not as a real model with toy values
    check_scale(cfg)  # a real model with tiny values stops here, before anything is loaded or written
    ladder.prepare(cfg)  # per-variant data, held-out data present (training/ladder.py)
    preflight.check(cfg)  # vLLM configs and served endpoints (training/preflight.py)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(redact(cfg), indent=1, default=str))
    is_main = int(os.environ.get("RANK", "0")) == 0
    wb = init_wandb(cfg, out, is_main)
    if cfg.prover.enabled:  # problems, not trajectories (held-out problems disjoint from training)
        train_trajs, eval_trajs = load_problems(cfg.prover, cfg.data)
    else:
        train_trajs, eval_trajs = load_trajectories_for(cfg.data)
    log.info("%s: %d training and %d held-out trajectories", cfg.experiment_name, len(train_trajs), len(eval_trajs))
    if cfg.eval.enabled and not eval_trajs:
        raise ladder.LadderConfigError(f"{cfg.experiment_name}: no held-out trajectories (data.eval_path="
                                       f"{cfg.data.eval_path}); the run would write no metrics. Fix the data or "
                                       f"set eval.enabled=false")
    summary: dict[str, Any] = {"experiment": cfg.experiment_name, "run_name": run_name(cfg),
                               "n_train": len(train_trajs), "n_eval": len(eval_trajs)}
    if cfg.train:
        if not train_trajs:
            raise InputError("no training trajectories (check data.source / data.train_path)")
        tsum = train(cfg, out, train_trajs, wb)  # every rank; the final weights are on disk when it returns
        model_dir = tsum["final"]
        summary["train"] = {k: v for k, v in tsum.items() if k != "log_history"}
        if is_main:
            (out / "train_log.json").write_text(json.dumps(tsum["log_history"], indent=1))
            # Always on disk, also with eval.enabled=false: reward-judge counts, grades, steps.
            (out / "train_summary.json").write_text(json.dumps(summary, indent=1, default=str))
            if not cfg.prover.enabled:  # a prover run trains no verifier
                write_card(out, verifier_card(cfg, tsum["log_history"]))
    elif cfg.evaluate_run:  # pess_ver: another row's final weights, judged with its own eval.*
        model_dir = str(ladder.wait_for_run(cfg.evaluate_run, cfg.evaluate_run_wait_s))
        summary["evaluated_run"] = {"dir": str(cfg.evaluate_run), "weights": model_dir}
    else:  # the `base` row: the initial model, evaluated as it is
        model_dir = ensure_model(cfg.init_from or cfg.model.name_or_path)
    metrics: dict[str, Any] = {}
    if cfg.eval.enabled and eval_trajs and is_main:
        if cfg.prover.enabled:  # held-out ProverBench on the saved prover (training.prover_reward)
            metrics = evaluate_prover(cfg.prover, cfg.eval, out, eval_trajs, model_dir, cfg.experiment_name)
        else:
            metrics = evaluate_heldout(cfg, out, eval_trajs, model_dir)
        metrics["run"] = summary
        write_metrics(out, metrics)
        if wb is not None:
            flat = {f"eval/{k}": v for k, v in flat_metrics(metrics).items()
                    if not k.startswith(("config/", "eval_config/", "inputs/", "ids/"))}
            wb.log(flat)
            wb.summary.update(flat)
    if wb is not None:
        wb.finish()
    print(f"wrote {out}", flush=True)
    return metrics


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
            check_scale(cfg)  # fail in the job before starting processes
            ladder.prepare(cfg)
            launch_job(cfg, launcher)
            return
        run(cfg)

    _main()


if __name__ == "__main__":
    main()
