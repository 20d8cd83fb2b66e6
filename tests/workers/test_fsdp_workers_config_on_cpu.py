"""The per-rank batch plan a worker computes for itself when built by user code with only its section
(verl 0.5 semantics: ``mini per rank = ppo_mini_batch_size * n / dp``, deprecated global micro sizes / dp)."""

from __future__ import annotations

import pytest
from config_testlib import compose_section

from hybridrl.config.worker_plan import standalone_batch_plan

ACTOR_CHECKS = ["actor_rollout_ref.actor.", "actor_rollout_ref.rollout.log_prob"]


def _policy(world: int, checked=ACTOR_CHECKS, **values):
    """The worker plan of an ``actor_rollout_ref`` section (``values`` dotted with ``__``) on ``world`` ranks."""
    section = compose_section("actor_rollout_ref", **{"rollout__log_prob_micro_batch_size_per_gpu": 2, **values})
    return standalone_batch_plan(section, "actor_rollout_ref", world, checked).policy_worker_plan()


def test_actor_mini_batch_times_n_over_dp():
    plan = _policy(8, actor__ppo_mini_batch_size=16, actor__ppo_micro_batch_size_per_gpu=4, rollout__n=4)
    assert plan.actor.mini_batch_samples_per_rank == 8  # 16 prompts × 4 samples ÷ 8 ranks


def test_deprecated_global_micro_batch_becomes_per_gpu():
    plan = _policy(4, actor__ppo_mini_batch_size=8, actor__ppo_micro_batch_size=8)
    assert plan.actor.mini_batch_samples_per_rank == 2 and plan.actor.micro_batch_per_rank == 2  # 8 ÷ 4 ranks


def test_ulysses_ranks_share_samples():
    plan = _policy(
        4,
        actor__ppo_mini_batch_size=4,
        actor__ppo_micro_batch_size_per_gpu=1,
        actor__ulysses_sequence_parallel_size=2,
        model__use_remove_padding=True,  # Ulysses slices packed rows
    )
    assert plan.actor.mini_batch_samples_per_rank == 2  # 4 ÷ (4 ranks ÷ sp 2)


@pytest.mark.parametrize(
    ("section", "n", "world", "match"),
    [
        ({"ppo_mini_batch_size": 1, "ppo_micro_batch_size_per_gpu": 1}, 1, 4, "do not split over 4"),
        ({"ppo_mini_batch_size": 3, "ppo_micro_batch_size_per_gpu": 1}, 1, 2, "do not split over 2"),
        ({"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 3}, 1, 1, "ppo_micro_batch_size_per_gpu=3"),
        ({"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": None}, 1, 1, "ppo_micro_batch_size_per_gpu"),
    ],
)
def test_actor_errors_name_the_key(section, n, world, match):
    with pytest.raises(ValueError, match=match) as info:
        _policy(world, rollout__n=n, **{f"actor__{key}": value for key, value in section.items()})
    assert "actor_rollout_ref.actor." in str(info.value)


def test_dynamic_bsz_needs_no_micro_batch():
    plan = _policy(2, actor__ppo_mini_batch_size=8, actor__use_dynamic_bsz=True)
    assert plan.actor.mini_batch_samples_per_rank == 4


def test_log_prob_micro_batch_and_missing_error():
    plan = _policy(
        4,
        actor__ppo_mini_batch_size=8,
        actor__ppo_micro_batch_size_per_gpu=2,
        rollout__log_prob_micro_batch_size=8,
        rollout__log_prob_micro_batch_size_per_gpu=None,
    )
    assert plan.old_log_prob.micro_batch_per_rank == 2
    with pytest.raises(ValueError, match="actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"):
        _policy(1, checked=["actor_rollout_ref.ref.log_prob"])


def test_critic_uses_rollout_n_and_forward_micro_defaults_to_ppo_micro():
    critic = compose_section("critic", rollout_n=2, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2)
    plan = standalone_batch_plan(critic, "critic", 2, ["critic."]).critic_worker_plan()
    assert plan.critic.mini_batch_samples_per_rank == 4  # 4 × 2 ÷ 2
    assert plan.values.micro_batch_per_rank == 2


def test_reward_model_micro_batch():
    rm = compose_section("reward_model", micro_batch_size=8)
    assert standalone_batch_plan(rm, "reward_model", 2, ["reward_model."]).reward_model.micro_batch_per_rank == 4


def test_worker_section_is_detached_and_resolved():
    from omegaconf import OmegaConf

    from hybridrl.utils.config_defaults import section_with_defaults

    root = OmegaConf.create({"critic": {"ppo_epochs": 1, "cliprange_value": "${critic.ppo_epochs}"}})
    section = section_with_defaults(root.critic, "critic")
    section.ppo_epochs = 5
    assert section.cliprange_value == 1 and root.critic.ppo_epochs == 1
    assert section.loss_agg_mode == "token-mean"  # a key the user section lacks, filled from the YAML
