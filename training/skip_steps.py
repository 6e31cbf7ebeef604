"""Optimizer steps without signal: leave the policy where it is when a GRPO step has no gradient.

Section 4.3's GRPO gradient is the group-relative advantage times the policy's log-prob gradient. A step
whose every group has zero reward variance (all completions of a prompt rewarded alike) has advantage 0
everywhere and, at ``beta == 0``, a gradient that is exactly zero. Adam still moves the weights on such a
step: its update is ``lr * m / (sqrt(v) + eps)`` and the first moment ``m`` carries the last informative
step's direction, decaying by ``beta1`` per step, so a run of k steps without signal repeats the last
update about ``(1 - 0.9**k) / 0.1`` times. The GRPO diagnosis (reports/learning_2026-12-02_sft300_g8.md) saw exactly this:
``kl_to_init`` rising through runs of zero-gradient steps while the held-out reward fell.

``SkipStepsWithoutGradient`` sets every gradient to ``None`` on such a step before ``optimizer.step()``;
torch's optimizers skip a parameter without a gradient, so the weights, both Adam moments and Adam's
step count stay as they were (the learning-rate schedule still advances). The decision is global:
under DDP the gradients are already all-reduced, so every rank decides alike. Under DeepSpeed the
optimizer holds the (partitioned) gradients itself and ``p.grad`` is ``None`` here: nothing is
skipped. Counted in every log line as ``optim/skipped_steps`` (cumulative) and ``optim/step_skipped``.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback


def gradient_is_zero(params: list[torch.Tensor]) -> bool:
    """True when every gradient of ``params`` holds only zeros (and there is at least one gradient).

    >>> p = torch.nn.Parameter(torch.ones(2)); p.grad = torch.zeros(2)
    >>> gradient_is_zero([p])
    True
    >>> p.grad[1] = 1e-12; gradient_is_zero([p])
    False
    """
    grads = [p.grad for p in params if p.grad is not None]
    return bool(grads) and not any(bool(torch.any(g != 0)) for g in grads)


class SkipStepsWithoutGradient(TrainerCallback):
    """Drop the gradients of a zero-gradient step so that the optimizer leaves the model untouched."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.skipped = 0
        self._this_step = False

    def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
        params = [p for p in (model or self.trainer.model).parameters() if p.requires_grad]
        self._this_step = gradient_is_zero(params)
        if self._this_step:
            for p in params:
                p.grad = None
            self.skipped += 1

    def on_step_end(self, args, state, control, **kw):
        metrics = getattr(self.trainer, "_metrics", None)  # TRL's per-step metric store (trl 1.16)
        if metrics is not None:
            metrics["train"]["optim/step_skipped"].append(float(self._this_step))
            metrics["train"]["optim/skipped_steps"].append(float(self.skipped))
        self._this_step = False


def install(trainer: Any, enabled: bool) -> SkipStepsWithoutGradient | None:
    """Add the callback to ``trainer`` when ``enabled`` (``grpo.skip_zero_grad_steps``)."""
    if not enabled:
        return None
    cb = SkipStepsWithoutGradient(trainer)
    trainer.add_callback(cb)
    return cb
