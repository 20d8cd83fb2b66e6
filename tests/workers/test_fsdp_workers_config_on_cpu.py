"""Per-rank batch-size normalisation of the worker config sections (verl 0.5 semantics)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from hybridrl.workers.config_utils import (
    normalize_actor_batch_sizes,
    normalize_critic_batch_sizes,
    normalize_log_prob_batch_sizes,
    normalize_reward_model_batch_sizes,
    resolved_copy,
)


def test_actor_mini_batch_times_n_over_dp():
    actor = OmegaConf.create({"ppo_mini_batch_size": 16, "ppo_micro_batch_size_per_gpu": 4})
    normalize_actor_batch_sizes(actor, rollout_n=4, world_size=8)
    assert actor.ppo_mini_batch_size == 8  # 16 prompts × 4 samples ÷ 8 ranks


def test_deprecated_global_micro_batch_becomes_per_gpu():
    actor = OmegaConf.create(
        {"ppo_mini_batch_size": 8, "ppo_micro_batch_size": 8, "ppo_micro_batch_size_per_gpu": None}
    )
    normalize_actor_batch_sizes(actor, rollout_n=1, world_size=4)
    assert actor.ppo_mini_batch_size == 2 and actor.ppo_micro_batch_size_per_gpu == 2  # 8 ÷ 4 ranks


def test_ulysses_ranks_share_samples():
    actor = OmegaConf.create(
        {"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 1, "ulysses_sequence_parallel_size": 2}
    )
    normalize_actor_batch_sizes(actor, rollout_n=1, world_size=4)
    assert actor.ppo_mini_batch_size == 2  # 4 ÷ (4 ranks ÷ sp 2)


@pytest.mark.parametrize(
    ("section", "n", "world", "match"),
    [
        ({"ppo_mini_batch_size": 1, "ppo_micro_batch_size_per_gpu": 1}, 1, 4, "ppo_mini_batch_size=1"),
        ({"ppo_mini_batch_size": 3, "ppo_micro_batch_size_per_gpu": 1}, 1, 2, "not divisible"),
        ({"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 3}, 1, 1, "ppo_micro_batch_size_per_gpu=3"),
        ({"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": None}, 1, 1, "use_dynamic_bsz"),
    ],
)
def test_actor_errors_name_the_key(section, n, world, match):
    with pytest.raises(ValueError, match=match) as info:
        normalize_actor_batch_sizes(
            OmegaConf.create(section), rollout_n=n, world_size=world, prefix="actor_rollout_ref.actor"
        )
    assert "actor_rollout_ref.actor." in str(info.value)


def test_dynamic_bsz_needs_no_micro_batch():
    actor = OmegaConf.create({"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": None, "use_dynamic_bsz": True})
    normalize_actor_batch_sizes(actor, rollout_n=1, world_size=2)
    assert actor.ppo_mini_batch_size == 4


def test_log_prob_micro_batch_and_missing_error():
    rollout = OmegaConf.create({"log_prob_micro_batch_size": 8, "log_prob_micro_batch_size_per_gpu": None})
    normalize_log_prob_batch_sizes(rollout, world_size=4, prefix="actor_rollout_ref.rollout")
    assert rollout.log_prob_micro_batch_size_per_gpu == 2
    with pytest.raises(ValueError, match="actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"):
        normalize_log_prob_batch_sizes(
            OmegaConf.create({"log_prob_micro_batch_size_per_gpu": None}), world_size=1, prefix="actor_rollout_ref.ref"
        )


def test_critic_uses_rollout_n_and_forward_micro_defaults_to_ppo_micro():
    critic = OmegaConf.create(
        {
            "rollout_n": 2,
            "ppo_mini_batch_size": 4,
            "ppo_micro_batch_size_per_gpu": 2,
            "forward_micro_batch_size_per_gpu": None,
        }
    )
    normalize_critic_batch_sizes(critic, world_size=2)
    assert critic.ppo_mini_batch_size == 4  # 4 × 2 ÷ 2
    assert critic.forward_micro_batch_size_per_gpu == 2


def test_reward_model_micro_batch():
    rm = OmegaConf.create({"micro_batch_size": 8, "micro_batch_size_per_gpu": None})
    normalize_reward_model_batch_sizes(rm, world_size=2)
    assert rm.micro_batch_size_per_gpu == 4


def test_resolved_copy_is_detached_and_resolved():
    root = OmegaConf.create({"a": {"x": 1, "y": "${a.x}"}})
    section = resolved_copy(root.a)
    section.x = 5
    assert section.y == 1 and root.a.x == 1
