"""A policy loss registered by user code through verl's ``core_algos.register_policy_loss`` reaches the actor.

The actor imports only ``hybridrl.algos``; the registry dict is shared, so the user's verl-signature
loss (returning verl 0.5's 4-tuple) is called with the actor config and its values become the
``actor/*`` metrics, while the built-in modes call the pure loss.
"""

from __future__ import annotations

import copy

import pytest
import torch

from hybridrl.algos import policy_losses
from hybridrl.trainer.ppo import core_algos
from hybridrl.workers.actor import DataParallelPPOActor

USER_LOSS = "test_user_ppo_unclipped"


def _user_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None):
    """verl 0.5 style: −A·ρ, no clipping; constant metrics so the test can recognise them."""
    ratio = torch.exp(log_prob - old_log_prob)
    loss = core_algos.agg_loss(-advantages * ratio, response_mask, loss_agg_mode)
    calls.append(config.loss_agg_mode)
    return loss, torch.tensor(0.125), torch.tensor(0.5), torch.tensor(0.25)


calls: list[str] = []


@pytest.fixture
def user_loss():
    core_algos.register_policy_loss(USER_LOSS)(_user_loss)
    calls.clear()
    yield USER_LOSS
    core_algos.POLICY_LOSS_REGISTRY.pop(USER_LOSS)


def _actor(model, config):
    return DataParallelPPOActor(config, model, torch.optim.AdamW(model.parameters(), lr=1e-3))


def test_user_registered_loss_runs_in_the_actor(user_loss, causal_lm, make_batch, make_actor_config):
    model = copy.deepcopy(causal_lm)
    config = make_actor_config(policy_loss={"loss_mode": user_loss}, ppo_micro_batch_size_per_gpu=2)
    metrics = _actor(model, config).update_policy(make_batch(batch_size=4))
    assert calls == ["token-mean", "token-mean"]  # once per micro-batch, with the actor config
    assert metrics["actor/pg_clipfrac"] == [0.125, 0.125]
    assert metrics["actor/ppo_kl"] == [0.5, 0.5] and metrics["actor/pg_clipfrac_lower"] == [0.25, 0.25]
    assert len(metrics["actor/grad_norm"]) == 1


def test_built_in_mode_binds_the_pure_loss_once(causal_lm, make_actor_config):
    actor = _actor(copy.deepcopy(causal_lm), make_actor_config(clip_ratio_high=0.28))
    assert actor._pg_loss.func is policy_losses.ppo_clip_loss
    assert actor._pg_loss.keywords["clip_ratio_high"] == 0.28


def test_reference_actor_resolves_no_loss(causal_lm, make_actor_config):
    assert DataParallelPPOActor(make_actor_config(), causal_lm)._pg_loss is None
