"""Wall time of each phase of a GRPO step, logged with the step's metrics (section 4.3).

:func:`install` wraps a ``trl.GRPOTrainer`` (TRL 1.16) at the seams where the phases begin and end and
adds a callback that, at the end of every optimizer step, appends the step's times to the trainer's
own metrics (``trainer._metrics["train"]``, the dict TRL averages into each log line): so they reach
the log history (``DIR/train_log.json``) and W&B like ``reward`` or ``step_time``. Seconds per
optimizer step, summed over its gradient-accumulation micro-steps, this rank's own clock:

``phase/generation_s``   ``_generate``: HF ``generate`` or vLLM ``generate`` (+ decoding), weight sync excluded
``phase/weight_sync_s``  ``vllm_generation.sync_weights``: the policy pushed into the vLLM engine (0 without vLLM)
``phase/reward_s``       ``_calculate_rewards``: every reward function
``phase/logprobs_s``     the rest of ``_generate_and_score_completions``: tokenising, the old/reference
                         policy's log-probs, advantages, metric gathering
``phase/backward_s``     the rest of ``training_step``: the loss forward and backward
``phase/optimizer_s``    ``optimizer.step()`` (under DeepSpeed the step runs inside backward; ~0 here)
``phase/step_s``         the whole optimizer step (``on_step_begin`` to ``on_step_end``)
``phase/other_s``        ``step_s`` minus the phases above (gradient clipping, scheduler, callbacks)

Each region's time is exclusive: a nested region (weight sync inside generation, generation inside
the loss step) is counted once, in the innermost phase, so the phases add up to ``step_s``.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from typing import Any

PHASES = ("generation", "weight_sync", "reward", "logprobs", "backward", "optimizer")
KEYS = tuple(f"phase/{p}_s" for p in (*PHASES, "step", "other"))

# GRPOTrainer method -> the phase its own (exclusive) time is counted in
METHOD_PHASES = {"training_step": "backward", "_generate_and_score_completions": "logprobs",
                 "_generate": "generation", "_calculate_rewards": "reward"}


class PhaseClock:
    """Exclusive wall time per phase: a region's time minus the time of the regions nested in it."""

    def __init__(self) -> None:
        self.acc: dict[str, float] = defaultdict(float)
        self._stack: list[list] = []  # [phase, start, time of nested regions]

    def enter(self, phase: str) -> None:
        self._stack.append([phase, time.perf_counter(), 0.0])

    def exit(self) -> None:
        phase, t0, inner = self._stack.pop()
        d = time.perf_counter() - t0
        self.acc[phase] += d - inner
        if self._stack:
            self._stack[-1][2] += d

    def wrap(self, fn, phase: str):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self.enter(phase)
            try:
                return fn(*args, **kwargs)
            finally:
                self.exit()

        timed.__phase_timed__ = phase
        return timed

    def take(self) -> dict[str, float]:
        """The accumulated times, reset to zero."""
        out = dict(self.acc)
        self.acc.clear()
        return out


def install(trainer) -> PhaseClock:
    """Time ``trainer``'s GRPO step phases and log them with its metrics; returns the clock.

    Call after anything that replaces ``trainer.vllm_generation.sync_weights`` (the CPU colocate sync of
    ``training.trainer``), so that the replacement is what gets timed. Installing twice is a no-op.
    """
    # lazy: transformers takes seconds to import; only a training run installs the timer
    from transformers import TrainerCallback

    if getattr(trainer, "_phase_clock", None) is not None:
        return trainer._phase_clock
    clock = PhaseClock()
    for name, phase in METHOD_PHASES.items():
        setattr(trainer, name, clock.wrap(getattr(trainer, name), phase))
    gen = getattr(trainer, "vllm_generation", None)
    if gen is not None:
        gen.sync_weights = clock.wrap(gen.sync_weights, "weight_sync")

    class PhaseTimes(TrainerCallback):
        """Opens the step's clock, times the optimizer step, and hands the step's phases to TRL's metrics."""

        def __init__(self) -> None:
            self.t_step: float | None = None
            self.t_opt: float | None = None

        def on_step_begin(self, args, state, control, **kw):
            self.t_step = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, **kw):
            self.t_opt = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kw):
            if self.t_opt is not None:
                clock.acc["optimizer"] += time.perf_counter() - self.t_opt
                self.t_opt = None

        def on_step_end(self, args, state, control, **kw):
            times = clock.take()
            if self.t_step is None:
                return
            step = time.perf_counter() - self.t_step
            self.t_step = None
            metrics = trainer._metrics["train"]
            for p in PHASES:
                metrics[f"phase/{p}_s"].append(times.get(p, 0.0))
            metrics["phase/step_s"].append(step)
            metrics["phase/other_s"].append(step - sum(times.get(p, 0.0) for p in PHASES))

    trainer.add_callback(PhaseTimes())
    trainer._phase_clock = clock
    return clock


def summarize(log_history: list[dict[str, Any]], skip_first: int = 1) -> dict[str, dict[str, float]]:
    """Per phase key: mean, min and max seconds over the logged steps (the first ``skip_first`` steps left
    out: they carry one-off warm-up such as vLLM's first compile), and the steps used (``n``).

    >>> h = [{"step": s, "phase/step_s": t, "phase/generation_s": t / 2} for s, t in ((1, 9.0), (2, 2.0), (3, 4.0))]
    >>> summarize(h)["phase/step_s"]
    {'mean': 3.0, 'min': 2.0, 'max': 4.0, 'n': 2}
    """
    rows = [h for h in log_history if "phase/step_s" in h]
    rows = rows[skip_first:] if len(rows) > skip_first else rows
    out: dict[str, dict[str, float]] = {}
    for k in KEYS:
        vals = [float(h[k]) for h in rows if h.get(k) is not None]
        if vals:
            out[k] = {"mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals), "n": len(vals)}
    return out
