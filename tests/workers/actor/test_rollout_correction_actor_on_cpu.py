"""Rollout correction inside DataParallelPPOActor.update_policy on the tiny Qwen2 model (fp32, CPU):
the driver's IS weights multiply the per-token loss, and bypass mode's loss equals the plain PPO path when the
rollout's log-probs are the old ones."""

from __future__ import annotations

import copy

import pytest
import torch

from hybridrl.algos.rollout_correction import rollout_correction_params
from hybridrl.workers.actor import DataParallelPPOActor


def _update(model, config, data, lr=1e-3):
    model = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    metrics = DataParallelPPOActor(config, model, optimizer).update_policy(data)
    return model, metrics


def _params_equal(model_a, model_b) -> bool:
    return all(torch.equal(a, b) for a, b in zip(model_a.parameters(), model_b.parameters()))


def _correction(**overrides):
    section = dict(rollout_is=None, rollout_is_threshold=2.0, rollout_rs=None, rollout_rs_threshold=None,
                   bypass_mode=False, loss_type="ppo_clip", rollout_is_batch_normalize=False)
    return rollout_correction_params({**section, **overrides})


def test_unit_weights_give_bitwise_the_update_without_weights(causal_lm, make_batch, make_actor_config):
    plain_data, weighted_data = make_batch(batch_size=4), make_batch(batch_size=4)
    weighted_data.batch["rollout_is_weights"] = weighted_data.batch["response_mask"].float()
    plain, _ = _update(causal_lm, make_actor_config(), plain_data)
    weighted, _ = _update(causal_lm, make_actor_config(), weighted_data)
    assert _params_equal(plain, weighted)


def test_weights_multiply_the_policy_loss(causal_lm, make_batch, make_actor_config):
    plain_data, weighted_data = make_batch(batch_size=4), make_batch(batch_size=4)
    weighted_data.batch["rollout_is_weights"] = torch.full_like(weighted_data.batch["advantages"], 2.0)
    _, plain = _update(causal_lm, make_actor_config(), plain_data)
    _, weighted = _update(causal_lm, make_actor_config(), weighted_data)
    # one mini-batch, one micro-batch: the first (and only) loss is computed before any step
    assert weighted["actor/pg_loss"][0] == pytest.approx(2 * plain["actor/pg_loss"][0], rel=1e-6)


def test_bypass_ppo_clip_equals_the_plain_update_when_rollout_is_old(causal_lm, make_batch, make_actor_config):
    plain_data, bypass_data = make_batch(batch_size=4), make_batch(batch_size=4)
    bypass_data.batch["old_log_probs"] = bypass_data.batch["old_log_probs"].clone()  # = rollout_log_probs (driver)
    bypass_data.meta_info["rollout_correction"] = _correction(bypass_mode=True, rollout_is="token")
    plain, _ = _update(causal_lm, make_actor_config(), plain_data)
    bypassed, metrics = _update(causal_lm, make_actor_config(), bypass_data)
    assert _params_equal(plain, bypassed)
    assert "rollout_corr/rollout_is_mean" in metrics and "rollout_corr/kl" in metrics


def test_bypass_reinforce_trains_and_reports_its_metrics(causal_lm, make_batch, make_actor_config):
    data = make_batch(batch_size=4)
    data.meta_info["rollout_correction"] = _correction(bypass_mode=True, loss_type="reinforce", rollout_is="sequence",
                                                       rollout_rs="seq_mean_k1", rollout_rs_threshold=1e6)
    updated, metrics = _update(causal_lm, make_actor_config(), data)
    assert not _params_equal(causal_lm, updated)
    assert "actor/pg_clipfrac" not in metrics  # REINFORCE has no clipping (verl reports only actor/ppo_kl)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == [0.0]  # bounds [1e-6, 1e6]: nothing rejected
