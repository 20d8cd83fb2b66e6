"""The divergence guard: skipped non-finite optimizer steps are counted, too many in a row stop the run, and no
checkpoint is written from a diverged state (issue 21, finding 3)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from hybridrl.workers.actor import DataParallelPPOActor
from hybridrl.workers.actor.divergence import (
    DivergenceError,
    NonFiniteStepGuard,
    first_non_finite_parameter,
    global_weight_norm,
)

NAN, INF = float("nan"), float("inf")


# ---------------------------------------------------------------- the counter


def test_finite_norms_reset_the_consecutive_count_and_skips_accumulate():
    guard = NonFiniteStepGuard("actor_rollout_ref.actor", max_consecutive=3, lr=1e-6)
    applied = [guard.record(norm) for norm in (0.5, NAN, INF, 0.25, NAN)]
    assert applied == [True, False, False, True, False]
    assert guard.optimizer_steps == 5
    assert guard.skipped_total == 3  # NaN, inf, NaN
    assert guard.consecutive_skipped == 1  # only the last one: 0.25 at step 4 reset the run of skips
    assert guard.last_finite_grad_norm == 0.25 and guard.last_finite_step == 4


def test_the_bound_raises_naming_the_count_last_finite_norm_and_causes():
    guard = NonFiniteStepGuard("actor_rollout_ref.actor", max_consecutive=2, lr=1e10)
    guard.record(0.0)  # step 1: finite (zero grads), applied
    assert guard.record(NAN) is False  # step 2: 1 in a row, below the bound
    with pytest.raises(DivergenceError) as raised:
        guard.record(INF)  # step 3: 2 in a row = the bound
    message = str(raised.value)
    assert "2 consecutive optimizer steps had a non-finite grad norm" in message
    assert "actor_rollout_ref.actor.max_consecutive_nonfinite_steps=2" in message
    assert "last finite grad norm was 0 (optimizer step 1)" in message
    assert "actor_rollout_ref.actor.optim.lr=10000000000.0" in message
    assert "dtype" in message and "reward" in message


def test_a_bound_of_one_stops_at_the_first_skip_and_reports_no_finite_step():
    guard = NonFiniteStepGuard("critic", max_consecutive=1, lr=1e-5)
    with pytest.raises(DivergenceError, match="no optimizer step of this run had a finite grad norm"):
        guard.record(NAN)
    with pytest.raises(ValueError, match="critic.max_consecutive_nonfinite_steps must be >= 1"):
        NonFiniteStepGuard("critic", max_consecutive=0, lr=1e-5)


def test_save_is_refused_after_a_skipped_step_or_with_nan_weights():
    module = nn.Linear(2, 2)
    guard = NonFiniteStepGuard("critic", max_consecutive=3, lr=1e-5)
    guard.check_savable(module)  # fresh, finite: allowed
    guard.record(NAN)
    with pytest.raises(DivergenceError, match="refusing to save a checkpoint: the latest 1 optimizer step"):
        guard.check_savable(module)
    guard.record(1.0)  # a finite step again: allowed
    guard.check_savable(module)
    with torch.no_grad():
        module.bias[1] = math.inf
    assert first_non_finite_parameter(module) == "bias"
    with pytest.raises(DivergenceError, match="parameter 'bias' holds NaN/inf"):
        guard.check_savable(module)


def test_weight_norm_growth_over_ten_times_in_one_step_raises():
    guard = NonFiniteStepGuard("actor_rollout_ref.actor", max_consecutive=3, lr=1e10)
    guard.record(0.5)
    guard.check_weight_growth(2.0, 19.9)  # x9.95: allowed
    with pytest.raises(DivergenceError, match=r"optimizer step 1 \(grad norm 0.5\) changed the global weight norm "
                       r"from 2 to 20.1 \(more than x10"):
        guard.check_weight_growth(2.0, 20.1)
    with pytest.raises(DivergenceError, match="from 2 to inf"):
        guard.check_weight_growth(2.0, math.inf)


def test_global_weight_norm_of_a_plain_module():
    module = nn.Linear(2, 1)
    with torch.no_grad():
        module.weight.copy_(torch.tensor([[3.0, 0.0]]))
        module.bias.fill_(4.0)
    assert global_weight_norm(module) == 5.0  # sqrt(3² + 0² + 4²)


# ---------------------------------------------------------------- the actor's update


def test_actor_skips_nan_steps_keeps_weights_and_stops_at_the_bound(causal_lm, make_batch, make_actor_config):
    data = make_batch(batch_size=4)
    data.batch["advantages"] = torch.full_like(data.batch["advantages"], math.nan)  # NaN loss -> NaN grad norm
    model = copy.deepcopy(causal_lm)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # 2 mini-batches of 2 samples per update -> 2 optimizer steps; the bound (3) is reached in the second update
    config = make_actor_config(ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=2, max_consecutive_nonfinite_steps=3)
    actor = DataParallelPPOActor(config, model, optimizer)
    metrics = actor.update_policy(data)
    assert all(math.isnan(norm) for norm in metrics["actor/grad_norm"]) and len(metrics["actor/grad_norm"]) == 2
    assert actor.divergence_guard.skipped_total == 2
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # both steps skipped
    with pytest.raises(DivergenceError, match="3 consecutive optimizer steps"):
        actor.update_policy(data)


def test_reference_actor_has_no_guard(causal_lm, make_actor_config):
    assert DataParallelPPOActor(make_actor_config(), causal_lm).divergence_guard is None


def test_actor_step_with_a_huge_lr_stops_before_the_broken_weights_are_used(causal_lm, make_batch, make_actor_config):
    model = copy.deepcopy(causal_lm)
    config = make_actor_config()
    config.optim.lr = 1e10
    actor = DataParallelPPOActor(config, model, torch.optim.AdamW(model.parameters(), lr=1e10))
    with pytest.raises(DivergenceError, match="changed the global weight norm") as raised:
        actor.update_policy(make_batch(batch_size=4))
    assert "actor_rollout_ref.actor.optim.lr=10000000000.0" in str(raised.value)
