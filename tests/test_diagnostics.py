"""GRPO diagnosis (training/diagnostics.py, issue 23 item 1): KL to the warm start at beta 0, per-step plots."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


def test_kl_to_init_is_zero_at_the_warm_start_and_grows_as_the_policy_moves(tiny_model):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    from training.diagnostics import KLToInit

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    add_fused_lm_head(model, temperature=1.0)  # what GRPOTrainer does to the policy (a closure over this model)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    prompts = [[{"role": "user", "content": f"Verify: {i} + 1 = {i + 1}"}] for i in range(3)]
    trainer = SimpleNamespace(model=model, processing_class=tok, train_dataset=[{"prompt": p} for p in prompts],
                              args=SimpleNamespace(temperature=1.0, max_completion_length=8),
                              accelerator=SimpleNamespace(unwrap_model=lambda m: m),
                              _metrics={"train": {}})
    kl = KLToInit(trainer, n=3, seed=0)
    assert len(kl.batches) == 3
    assert kl.value() == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():  # one small step away from the warm start
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    small = kl.value()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    assert 0 < small < kl.value()


def test_plot_train_logs_draws_every_panel(tmp_path):
    from training.diagnostics import PANELS, panel_keys, plot_train_logs, summarize

    hist = [{"step": s, "reward": 0.1 * s, "rewards/meta/mean": 0.1 * s, "rewards/format_reward/mean": 1.0,
             "completions/mean_length": 90 - s, "completions/truncated_frac": 0.1, "completions/clipped_ratio": 0.1,
             "completions/unparseable_frac": 0.2, "frac_reward_zero_std": 0.5, "kl_to_init": 0.01 * s,
             "entropy": 1.0} for s in range(1, 5)]
    assert panel_keys(hist, PANELS[0][1]) == ["reward", "rewards/format_reward/mean", "rewards/meta/mean"]
    png = plot_train_logs({"a": hist, "b": hist[:2]}, tmp_path / "d.png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    s = summarize(hist)
    assert s["kl_to_init"]["first"] == pytest.approx(0.01) and s["kl_to_init"]["last"] == pytest.approx(0.04)


def test_the_plot_command_names_a_missing_log_in_one_line(tmp_path):
    """``python -m training.diagnostics DIR``: a folder without train_log.json is one line naming it, exit 2."""
    import subprocess
    import sys
    from pathlib import Path

    r = subprocess.run([sys.executable, "-m", "training.diagnostics", str(tmp_path / "nope")], capture_output=True,
                       text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-1000:]
    assert r.stderr.strip().splitlines()[-1] == f"training.diagnostics: error: {tmp_path / 'nope'}: no train_log.json"
