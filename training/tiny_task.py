"""The CPU-scale setting shared by the prover-verifier loop and the benches: the tiny model, the synthetic task, and
the prover's SFT and GRPO budget.

A config that runs this setting inherits these fields (flat ``key=value`` options, unchanged names) and redeclares
the defaults it chooses differently; the field lists live here once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TinyTask:
    """The tiny model's sizes (``verifier.tiny_model``, the demo's) and the synthetic task: chains of
    ``min_steps``-``max_steps`` operations on operands up to ``max_operand``, every proof's truth known exactly
    (``data_pipeline.synthetic_check``)."""

    hidden_size: int = 128
    num_layers: int = 2
    intermediate_size: int = 384
    min_steps: int = 3
    max_steps: int = 3
    max_operand: int = 9
    n_prover_sft: int = 2000  # problems of the prover's SFT on gold proofs


@dataclass
class ProverBudget(TinyTask):
    """The prover's budget: SFT on gold proofs, GRPO (section 3.3's prover reward), held-out sampling
    (``eval_passes`` pessimistic judging passes, section 4.4)."""

    prover_sft_steps: int = 2000
    prover_sft_lr: float = 3e-3
    sft_batch: int = 16
    grpo_steps: int = 24
    grpo_batch: int = 128
    num_generations: int = 8
    grpo_lr: float = 3e-5
    max_completion_length: int = 64  # the prover's token budget
    temperature: float = 0.5  # the prover's sampling temperature (GRPO; in the loop also its proofs and repairs)
    eval_passes: int = 8
    eval_temperature: float = 0.5
