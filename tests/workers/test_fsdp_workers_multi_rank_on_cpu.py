"""2 ranks (FSDP2 over gloo, Ray worker group) give the same actor update as 1 rank on the same global batch."""

from __future__ import annotations

import pytest
import torch
from fsdp_workers_testlib import ppo_batch, ppo_config
from omegaconf import OmegaConf

pytestmark = pytest.mark.slow


def _actor_group(ray, config, world_size: int, name: str):
    """An initialised actor worker group on its own CPU pool; returns (pool, group)."""
    from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    pool = RayResourcePool([world_size], use_gpu=False, max_colocate_count=1, name_prefix=name)
    cls = RayClassWithInitArgs(ray.remote(ActorRolloutRefWorker), config=config, role="actor")
    group = RayWorkerGroup(pool, cls, device_name="cpu", worker_env={"HYBRIDRL_DEVICE": "cpu"})
    group.init_model()
    return pool, group


def _teardown(pool, group) -> None:
    group.kill()
    pool.release()


def _update_then_probe(ray, config, world_size: int):
    """Global batch of 8 → update_actor → log-probs of a probe batch. Returns (metrics, log_probs [8, R])."""
    pool, group = _actor_group(ray, config, world_size, f"f2_update_w{world_size}")
    try:
        metrics = group.update_actor(ppo_batch(batch_size=8, seed=5)).meta_info["metrics"]
        log_probs = group.compute_log_prob(ppo_batch(batch_size=8, seed=6)).batch["old_log_probs"]
        return metrics, log_probs
    finally:
        _teardown(pool, group)


def test_two_ranks_match_one_rank(ray_cluster, tiny_model_dir):
    # global mini batch 8: 1 rank holds 8 (4 micro-batches of 2), 2 ranks hold 4 each (2 micro-batches of 2);
    # FSDP averages the two ranks' gradients, so both runs take the same optimizer step.
    cfg = ppo_config(tiny_model_dir, "actor_rollout_ref.actor.ppo_mini_batch_size=8", "data.train_batch_size=8")
    OmegaConf.resolve(cfg)
    metrics_1, log_probs_1 = _update_then_probe(ray_cluster, cfg.actor_rollout_ref, world_size=1)
    metrics_2, log_probs_2 = _update_then_probe(ray_cluster, cfg.actor_rollout_ref, world_size=2)
    grad_norm_1 = metrics_1["actor/grad_norm"]
    grad_norm_2 = metrics_2["actor/grad_norm"]  # one entry per rank, equal across ranks
    assert len(grad_norm_2) == 2 and grad_norm_2[0] == pytest.approx(grad_norm_2[1], rel=1e-6)
    assert grad_norm_2[0] == pytest.approx(grad_norm_1[0], rel=1e-4)
    torch.testing.assert_close(log_probs_2, log_probs_1, rtol=1e-4, atol=1e-4)
    # the update moved the policy: the probe's log-probs differ from the untouched model's
    pool, group = _actor_group(ray_cluster, cfg.actor_rollout_ref, 1, "f2_untouched")
    try:
        untouched = group.compute_log_prob(ppo_batch(batch_size=8, seed=6)).batch["old_log_probs"]
    finally:
        _teardown(pool, group)
    assert (untouched - log_probs_1).abs().max() > 1e-4
