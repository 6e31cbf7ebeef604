"""Steps without gradient leave the policy untouched (training/skip_steps.py, issue 23's diagnosis)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from training.skip_steps import SkipStepsWithoutGradient, gradient_is_zero


def _model_and_adam():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.01)
    model(torch.randn(2, 4)).sum().backward()  # one informative step: Adam's first moment now holds its direction
    opt.step()
    return model, opt


def _zero_grad_step(model, opt, skip: bool):
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # a step whose every advantage is 0 (beta 0): the loss gradient is exactly 0
    trainer = SimpleNamespace(model=model, _metrics={"train": {"optim/step_skipped": [], "optim/skipped_steps": []}})
    cb = SkipStepsWithoutGradient(trainer)
    if skip:
        cb.on_pre_optimizer_step(None, None, None, model=model)
    opt.step()
    cb.on_step_end(None, None, None)
    return cb, trainer._metrics["train"]


def test_a_zero_gradient_step_moves_adam_and_the_callback_prevents_it():
    model, opt = _model_and_adam()
    before = [p.detach().clone() for p in model.parameters()]
    moments = [opt.state[p]["exp_avg"].clone() for p in model.parameters()]
    steps = [int(opt.state[p]["step"]) for p in model.parameters()]
    cb, logged = _zero_grad_step(model, opt, skip=True)
    assert cb.skipped == 1 and logged == {"optim/step_skipped": [1.0], "optim/skipped_steps": [1.0]}
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert all(torch.equal(m, opt.state[p]["exp_avg"]) for m, p in zip(moments, model.parameters()))
    assert steps == [int(opt.state[p]["step"]) for p in model.parameters()]

    # the same step without the callback: Adam's momentum repeats the last update (the drift of the diagnosis)
    model, opt = _model_and_adam()
    before = [p.detach().clone() for p in model.parameters()]
    _, logged = _zero_grad_step(model, opt, skip=False)
    assert any((a - p).abs().max() > 1e-3 for a, p in zip(before, model.parameters()))


def test_a_step_with_any_gradient_is_kept():
    model, opt = _model_and_adam()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    next(model.parameters()).grad[0, 0] = 1e-9
    assert not gradient_is_zero(list(model.parameters()))
    cb = SkipStepsWithoutGradient(SimpleNamespace(model=model, _metrics={"train": {}}))
    cb.on_pre_optimizer_step(None, None, None, model=model)
    assert cb.skipped == 0 and all(p.grad is not None for p in model.parameters())
    assert not gradient_is_zero([torch.nn.Parameter(torch.ones(1))])  # no gradient at all is not a zero gradient
