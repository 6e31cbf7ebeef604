"""GRPO step phase times (training/phase_times.py, issue 23 item 6) in a real tiny GRPOTrainer run."""

from __future__ import annotations

import pytest

from training.phase_times import KEYS, PHASES


def test_phase_times_are_in_the_log_history_and_add_up_to_trls_step_time(tmp_path, tiny_model, monkeypatch):
    from training.config import GRPORunConfig
    from training.data import load_trajectories_for
    from training.trainer import build_trainer
    from verifier.config import compose

    monkeypatch.setenv("WANDB_MODE", "disabled")
    cfg = compose("grpo", GRPORunConfig, [
        "experiment=smoke", f"output_dir={tmp_path}", f"model.name_or_path={tiny_model}", "grpo.max_steps=2",
        "grpo.save_steps=100", "grpo.max_completion_length=16", "grpo.gradient_accumulation_steps=2",
        "eval.enabled=false", "wandb.enabled=false"])
    train_trajs, _ = load_trajectories_for(cfg.data)
    trainer, _, _, _ = build_trainer(cfg, tmp_path, train_trajs)
    trainer.train()
    steps = [h for h in trainer.state.log_history if "loss" in h]
    assert len(steps) == 2
    for h in steps:
        for k in KEYS:
            assert k in h, (k, sorted(h))
        assert h["phase/generation_s"] > 0 and h["phase/reward_s"] > 0 and h["phase/backward_s"] > 0
        assert h["phase/logprobs_s"] > 0 and h["phase/optimizer_s"] > 0
        assert h["phase/weight_sync_s"] == 0  # HF generation: no engine to sync
        # the phases are exclusive: those inside training_step add up to TRL's own step_time (both micro-steps)
        inside = sum(h[f"phase/{p}_s"] for p in ("generation", "weight_sync", "reward", "logprobs", "backward"))
        assert inside == pytest.approx(h["step_time"], rel=0.05, abs=0.02)
        # and all of them (+ other) make up the whole optimizer step
        total = sum(h[f"phase/{p}_s"] for p in PHASES) + h["phase/other_s"]
        assert total == pytest.approx(h["phase/step_s"], rel=1e-6)
        assert h["phase/other_s"] >= 0
