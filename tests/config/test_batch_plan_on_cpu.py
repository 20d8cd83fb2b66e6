"""The batch plan, hand-checked (arithmetic in comments)."""

from __future__ import annotations

from hybridrl.config import compose_config, compute_batch_plan, format_batch_plan, plan_rows

PLAN_OVERRIDES = [
    "data.train_batch_size=16",  # B = 16 prompts
    "actor_rollout_ref.rollout.n=4",  # n = 4
    "trainer.n_gpus_per_node=2",  # W = 2 ranks, sp = 1 -> dp = 2
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",  # actor M = 8 prompts
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",  # actor m = 4
    "actor_rollout_ref.actor.ppo_epochs=2",  # critic follows: ppo_epochs = 2
    "critic.ppo_mini_batch_size=4",  # critic M = 4 prompts
    "critic.ppo_micro_batch_size_per_gpu=2",  # critic m = 2
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "algorithm.adv_estimator=gae",
    "trainer.total_epochs=3",
]


def test_plan_numbers_by_hand():
    plan = compute_batch_plan(compose_config("ppo_trainer", PLAN_OVERRIDES), dataset_len=100)
    assert plan.samples_per_step == 64  # 16 * 4
    assert plan.world_size == 2
    assert plan.samples_per_rank_per_step == 32  # 64 / 2
    actor = plan.actor
    assert actor.dp_size == 2
    assert actor.mini_batch_samples == 32  # 8 * 4
    assert actor.mini_batch_samples_per_rank == 16  # 32 / 2
    assert actor.mini_batches_per_step == 2  # 32 per rank / 16
    assert actor.grad_accum_steps == 4  # 16 / 4
    assert actor.optimizer_steps_per_step == 4  # 2 mini-batches * 2 epochs
    critic = plan.critic
    assert critic is not None
    assert critic.mini_batch_samples_per_rank == 8  # 4 * 4 / 2
    assert critic.mini_batches_per_step == 4  # 32 / 8
    assert critic.grad_accum_steps == 4  # 8 / 2
    assert critic.optimizer_steps_per_step == 8  # 4 * 2 epochs
    assert plan.old_log_prob_micro_batch_per_rank == 8
    assert plan.uses_reference_policy is False and plan.ref_log_prob_micro_batch_per_rank is None
    assert plan.steps_per_epoch == 6  # 100 // 16 (drop_last)
    assert plan.total_steps == 18  # 6 * 3 epochs
    assert plan.optimizer_steps(actor, plan.steps_per_epoch) == 24  # 6 * 4
    assert plan.optimizer_steps(actor, plan.total_steps) == 72  # 18 * 4


def test_total_training_steps_overrides_epochs():
    plan = compute_batch_plan(compose_config("ppo_trainer", [*PLAN_OVERRIDES, "trainer.total_training_steps=5"]), 100)
    assert plan.total_steps == 5


def test_uneven_last_mini_batch_counts():
    overrides = [*PLAN_OVERRIDES, "actor_rollout_ref.rollout.n=1", "trainer.n_gpus_per_node=1"]
    plan = compute_batch_plan(
        compose_config("ppo_trainer", [*overrides, "actor_rollout_ref.actor.ppo_mini_batch_size=6"])
    )
    assert plan.actor.mini_batches_per_step == 3  # 16 samples split by 6 -> 6, 6, 4
    assert plan.steps_per_epoch is None and plan.total_steps is None  # no dataset length yet


def test_no_critic_for_grpo_and_dynamic_bsz_in_table():
    overrides = [*PLAN_OVERRIDES, "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_dynamic_bsz=True"]
    plan = compute_batch_plan(compose_config("ppo_trainer", overrides))
    assert plan.critic is None
    assert plan.actor.micro_batch_per_rank is None and plan.actor.token_budget_per_rank == 16384
    rows = {q: v for q, v, _ in plan_rows(plan)}
    assert rows["actor: grad-accum steps per mini-batch"] == "dynamic"
    assert rows["critic"] == "none"


def test_table_lists_every_quantity():
    text = format_batch_plan(compute_batch_plan(compose_config("ppo_trainer", PLAN_OVERRIDES), dataset_len=100))
    for quantity in (
        "prompts per step",
        "samples per step",
        "world size",
        "actor: mini-batches per step",
        "actor: micro-batch per rank",
        "actor: grad-accum steps",
        "critic: optimizer steps per epoch",
        "steps per epoch",
        "total steps",
    ):
        assert quantity in text
