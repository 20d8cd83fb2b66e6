"""AdamW construction, verl's LR schedules (hand-computed values) and the guarded optimizer step."""

import copy
import math

import pytest
import torch
from config_testlib import compose_section
from torch import nn

from hybridrl.workers.engine.optim import (
    build_lr_scheduler,
    build_optimizer,
    clip_grad_and_step,
    fused_on_cpu,
    num_warmup_steps,
)


def _optim_config(**overrides):
    # lr 1.0 makes the scheduler multiplier visible directly as the lr
    return compose_section("actor_rollout_ref.actor.optim", **{"lr": 1.0, "total_training_steps": 10, **overrides})


def _lrs(config, num_steps):
    """lr after 0, 1, ..., num_steps scheduler steps."""
    optimizer = build_optimizer(nn.Linear(2, 1), config)
    scheduler = build_lr_scheduler(optimizer, config)
    lrs = [scheduler.get_last_lr()[0]]
    for _ in range(num_steps):
        optimizer.step()
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    return lrs


def test_build_optimizer_reads_lr_betas_weight_decay():
    optimizer = build_optimizer(nn.Linear(2, 1), _optim_config(lr=3e-4, betas=[0.8, 0.9], weight_decay=0.1))
    group = optimizer.param_groups[0]
    assert isinstance(optimizer, torch.optim.AdamW)
    assert (group["lr"], tuple(group["betas"]), group["weight_decay"]) == (3e-4, (0.8, 0.9), 0.1)


def test_cpu_adamw_is_fused_and_steps_as_the_unfused_loop():
    """The fused CPU kernel against torch's for-loop AdamW (the unoptimised path): five steps, same weights."""
    torch.manual_seed(0)
    fused_model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    loop_model = copy.deepcopy(fused_model)
    initial = fused_model[0].weight.detach().clone()
    config = _optim_config(lr=1e-2, weight_decay=0.1)
    fused = build_optimizer(fused_model, config)
    loop = torch.optim.AdamW(loop_model.parameters(), lr=1e-2, betas=(0.9, 0.999), weight_decay=0.1,
                             foreach=False)
    assert fused.param_groups[0]["fused"] is True and fused_on_cpu(list(fused_model.parameters()))
    for step in range(5):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step))
        for model, optimizer in ((fused_model, fused), (loop_model, loop)):
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            optimizer.step()
    for got, expected in zip(fused_model.parameters(), loop_model.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
    assert not torch.equal(fused_model[0].weight, initial)  # the steps moved the weights


def test_empty_or_non_cpu_parameters_keep_torch_default():
    assert not fused_on_cpu([])
    assert not fused_on_cpu([torch.zeros(2, device="meta")])
    assert build_optimizer(nn.Linear(2, 1), _optim_config()).param_groups[0]["fused"] is True


def test_warmup_steps_from_steps_or_ratio():
    assert num_warmup_steps(_optim_config(lr_warmup_steps=3, lr_warmup_steps_ratio=0.5)) == 3  # steps win when >= 0
    assert num_warmup_steps(_optim_config(lr_warmup_steps=0, lr_warmup_steps_ratio=0.5)) == 0  # verl: 0 means none
    assert num_warmup_steps(_optim_config(lr_warmup_steps_ratio=0.25)) == 2  # int(0.25 * 10) = int(2.5) = 2


def test_constant_schedule_with_warmup():
    # warmup 4: min(1, s/4) = 0, .25, .5, .75, 1, 1
    lrs = _lrs(_optim_config(lr_warmup_steps=4), 5)
    assert lrs == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 1.0])


def test_constant_schedule_without_warmup_is_flat():
    assert _lrs(_optim_config(), 3) == pytest.approx([1.0, 1.0, 1.0, 1.0])


def test_cosine_schedule_with_warmup_and_min_lr_ratio():
    # W=2, T=10, m=0.1 → coef=(1-m)/2=0.45, intercept=(1+m)/2=0.55
    config = _optim_config(warmup_style="cosine", lr_warmup_steps=2, min_lr_ratio=0.1)
    lrs = _lrs(config, 10)
    expected = {
        0: 0.0,  # warmup 0/2
        1: 0.5,  # warmup 1/2
        2: 1.0,  # progress 0: 0.45*cos(0) + 0.55
        4: 0.45 * math.cos(math.pi * 0.25) + 0.55,  # progress 2/8 → cos(π/4) → 0.868198
        6: 0.55,  # progress 4/8 → cos(π/2) = 0
        10: 0.1,  # progress 1 → cos(π) = -1 → -0.45 + 0.55 = min_lr_ratio
    }
    for step, value in expected.items():
        assert lrs[step] == pytest.approx(value), step


def test_cosine_needs_total_training_steps_and_unknown_style_is_an_error():
    optimizer = build_optimizer(nn.Linear(2, 1), _optim_config())
    with pytest.raises(ValueError, match="total_training_steps"):
        build_lr_scheduler(optimizer, _optim_config(warmup_style="cosine", total_training_steps=-1))
    with pytest.raises(ValueError, match="warmup_style"):
        build_lr_scheduler(optimizer, _optim_config(warmup_style="linear"))


def _linear_with_grads(weight_grad):
    module = nn.Linear(2, 1)
    module.weight.grad = torch.tensor([weight_grad])
    module.bias.grad = torch.zeros(1)
    return module


def test_clip_grad_and_step_clips_and_steps():
    module = _linear_with_grads([3.0, 4.0])  # ||g|| = sqrt(9 + 16) = 5
    before = module.weight.detach().clone()
    optimizer = build_optimizer(module, _optim_config(lr=0.1))
    grad_norm, stepped = clip_grad_and_step(module, optimizer, max_norm=1.0)
    assert grad_norm == pytest.approx(5.0)
    assert stepped
    torch.testing.assert_close(module.weight.grad, torch.tensor([[0.6, 0.8]]))  # g * 1/5
    assert not torch.equal(module.weight.detach(), before)


def test_zero_lr_step_leaves_params_unchanged():
    module = _linear_with_grads([3.0, 4.0])
    before = [p.detach().clone() for p in module.parameters()]
    optimizer = build_optimizer(module, _optim_config(lr=0.0))
    _, stepped = clip_grad_and_step(module, optimizer, max_norm=1.0)
    assert stepped
    for p, b in zip(module.parameters(), before):
        assert torch.equal(p.detach(), b)  # AdamW's decoupled decay is also scaled by lr


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_grad_norm_skips_step_and_counts(bad):
    module = _linear_with_grads([bad, 1.0])
    before = [p.detach().clone() for p in module.parameters()]
    optimizer = build_optimizer(module, _optim_config(lr=0.1))
    grad_norm, stepped = clip_grad_and_step(module, optimizer, max_norm=1.0)
    assert not math.isfinite(grad_norm)
    assert not stepped
    assert optimizer.num_skipped_steps == 1
    assert all(p.grad is None or not p.grad.any() for p in module.parameters())  # grads were zeroed
    for p, b in zip(module.parameters(), before):
        assert torch.equal(p.detach(), b)
    # a later finite step works and the count persists
    module.weight.grad, module.bias.grad = torch.ones(1, 2), torch.ones(1)
    assert clip_grad_and_step(module, optimizer, max_norm=1.0)[1]
    assert optimizer.num_skipped_steps == 1
