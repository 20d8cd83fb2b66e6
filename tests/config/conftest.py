"""A valid CPU PPO command line for the config tests (real files in a tmp folder)."""

from __future__ import annotations

import pytest


@pytest.fixture
def cpu_overrides(tmp_path):
    """Overrides that make ppo_trainer.yaml valid on this CPU machine (GRPO, 2 ranks, hf rollout)."""
    for name in ("train.parquet", "test.parquet"):
        (tmp_path / name).write_bytes(b"PAR1")
    (tmp_path / "model").mkdir()
    return [
        f"data.train_files={tmp_path / 'train.parquet'}",
        f"data.val_files={tmp_path / 'test.parquet'}",
        f"actor_rollout_ref.model.path={tmp_path / 'model'}",
        "data.train_batch_size=16",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",
    ]
