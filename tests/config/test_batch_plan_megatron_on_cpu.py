"""The driver's batch plan with ``strategy=megatron``: dp = world / (TP × PP × CP), and every per-rank size follows.

The Megatron worker divides by the same dp in ``_standalone_plan``; here the driver's plan must agree
(hand-computed numbers: 8 prompts × n=4 = 32 samples per step, mini-batch 4 prompts = 16 samples).
"""

from __future__ import annotations

import warnings

import pytest

from hybridrl.config import compute_batch_plan, format_batch_plan
from hybridrl.config.access import replica_size
from hybridrl.config.worker_plan import standalone_batch_plan
from tests.config_testlib import compose_config

BATCH = [
    "data.train_batch_size=8", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size=8",  # deprecated global size: / dp per rank
    "actor_rollout_ref.rollout.log_prob_micro_batch_size=16", "actor_rollout_ref.ref.log_prob_micro_batch_size=16",
    "trainer.nnodes=1",
]


def _plan(ranks: int, tp: int, *overrides: str, config_name: str = "ppo_megatron_trainer"):
    strategy = [f"actor_rollout_ref.actor.megatron.tensor_model_parallel_size={tp}"] if tp else []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated global micro-batch sizes, critic.enable
        config = compose_config(config_name, [*BATCH, f"trainer.n_gpus_per_node={ranks}", *strategy, *overrides])
        return compute_batch_plan(config)


@pytest.mark.parametrize("ranks,tp,dp", [(2, 2, 1), (4, 2, 2), (2, 1, 2), (4, 4, 1)])
def test_dp_is_ranks_over_tp(ranks, tp, dp):
    plan = _plan(ranks, tp)
    assert plan.actor.dp_size == dp and plan.actor.megatron_model_parallel == tp and plan.actor.sp_size == 1
    assert plan.samples_per_rank_per_step == 32 // dp  # 8 prompts × 4 responses over dp slices
    assert plan.actor.mini_batch_samples_per_rank == 16 // dp  # 4 × 4 samples per mini-batch over dp
    assert plan.actor.mini_batches_per_step == 2  # (32 / dp) / (16 / dp)
    assert plan.actor.micro_batch_per_rank == 8 // dp  # the deprecated global micro-batch 8 over dp
    assert plan.actor.grad_accum_steps == 2  # (16 / dp) / (8 / dp)
    assert plan.old_log_prob.micro_batch_per_rank == 16 // dp
    assert plan.ref_log_prob.micro_batch_per_rank == 16 // dp


def test_fsdp_counts_every_rank_as_dp():
    plan = _plan(4, 0, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
                 "actor_rollout_ref.model.use_remove_padding=True", config_name="ppo_trainer")
    assert (plan.actor.dp_size, plan.actor.megatron_model_parallel, plan.actor.mini_batch_samples_per_rank) == (2, None, 8)


def test_pp_and_cp_count_in_the_replica():
    config = compose_config("ppo_megatron_trainer", [
        *BATCH, "trainer.n_gpus_per_node=8", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
        "actor_rollout_ref.actor.megatron.context_parallel_size=2"])
    assert replica_size(config, "actor_rollout_ref.actor") == 8  # 2 × 2 × 2
    assert compute_batch_plan(config).actor.dp_size == 1


def test_critic_and_reward_model_follow_their_own_megatron_layout():
    plan = _plan(4, 1, "critic.enable=True", "critic.ppo_mini_batch_size=4", "critic.ppo_micro_batch_size_per_gpu=2",
                 "critic.megatron.tensor_model_parallel_size=2", "reward_model.enable=True",
                 "reward_model.micro_batch_size=8", "reward_model.megatron.tensor_model_parallel_size=4")
    assert plan.actor.dp_size == 4 and plan.critic.dp_size == 2  # actor TP 1, critic TP 2 on the same 4 ranks
    assert plan.critic.mini_batch_samples_per_rank == 8  # 16 / 2
    assert plan.reward_model.micro_batch_per_rank == 8  # rm dp = 4 / TP 4 = 1: the global 8 stays 8


def test_the_plan_table_names_the_megatron_replica():
    table = format_batch_plan(_plan(4, 2))
    assert "world 4 / TP·PP·CP 2" in table


def test_the_worker_standalone_plan_agrees_with_the_driver():
    """A worker built without a plan (MegatronActorRolloutRefWorker._standalone_plan: its group of 4 ranks) gets the
    driver's per-rank sizes: the plan of its section divides by TP itself."""
    config = compose_config("ppo_megatron_trainer", [*BATCH, "trainer.n_gpus_per_node=4",
                                                     "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                                                     "actor_rollout_ref.actor.ppo_micro_batch_size=null",
                                                     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"])
    driver = compute_batch_plan(config).actor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        worker = standalone_batch_plan(config.actor_rollout_ref, "actor_rollout_ref", 4, ["actor_rollout_ref.actor"])
    assert worker.actor.mini_batch_samples_per_rank == driver.mini_batch_samples_per_rank == 8
    assert worker.actor.grad_accum_steps == driver.grad_accum_steps == 2
