"""The workers' side of the divergence guard (issue 21, finding 3), called directly on one gloo rank with FSDP2:
``update_actor`` / ``update_critic`` report the skipped non-finite steps, and ``save_checkpoint`` refuses to write
from that state (nothing on disk), then saves again after a finite step."""

from __future__ import annotations

import math
import os

import pytest
from fsdp_workers_testlib import ppo_batch, ppo_config

from hybridrl.workers.actor.divergence import DivergenceError

pytestmark = pytest.mark.usefixtures("single_rank_env")


def test_actor_worker_counts_a_nan_step_and_refuses_to_save_it(tiny_model_dir, tmp_path):
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(ppo_config(tiny_model_dir).actor_rollout_ref, role="actor")
    worker.init_model()
    broken = ppo_batch()
    broken.batch["advantages"][:] = math.nan  # NaN loss -> NaN grad norm -> the step is skipped
    metrics = worker.update_actor(broken).meta_info["metrics"]
    assert metrics["actor/skipped_steps"] == 1  # 4 samples, mini-batch 4: one optimizer step, skipped
    assert all(math.isnan(norm) for norm in metrics["actor/grad_norm"])
    folder = tmp_path / "global_step_1" / "actor"
    with pytest.raises(DivergenceError, match="refusing to save a checkpoint: the latest 1 optimizer step"):
        worker.save_checkpoint(str(folder), global_step=1)
    assert not folder.exists()
    assert worker.update_actor(ppo_batch()).meta_info["metrics"]["actor/skipped_steps"] == 0
    worker.save_checkpoint(str(folder), global_step=1)  # a finite step again: allowed
    assert "checkpoint_complete.json" in os.listdir(folder)


def test_critic_worker_counts_a_nan_step_and_refuses_to_save_it(tiny_model_dir, tmp_path):
    from hybridrl.workers.fsdp_workers import CriticWorker

    worker = CriticWorker(ppo_config(tiny_model_dir).critic)
    worker.init_model()
    broken = ppo_batch()
    broken.batch["returns"][:] = math.inf
    assert worker.update_critic(broken).meta_info["metrics"]["critic/skipped_steps"] == 1
    with pytest.raises(DivergenceError, match="critic: refusing to save a checkpoint"):
        worker.save_checkpoint(str(tmp_path / "critic"), global_step=1)
    assert not (tmp_path / "critic").exists()
