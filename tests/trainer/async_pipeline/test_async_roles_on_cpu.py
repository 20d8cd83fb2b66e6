"""separate_async's roles and pools as main_ppo builds them (no Ray cluster needed)."""

from __future__ import annotations

from hybridrl.trainer.ppo.roles import Role
from hybridrl.trainer.ppo.task_runner import build_role_mapping
from hybridrl.trainer.ppo.worker_groups import WorkerGroups, actor_role
from tests.config_testlib import compose_config


def test_separate_async_puts_the_rollout_on_its_own_pool():
    config = compose_config("ppo_trainer", [
        "trainer.v1.trainer_mode=separate_async", "trainer.n_gpus_per_node=2", "trainer.nnodes=1",
        "actor_rollout_ref.rollout.nnodes=2", "actor_rollout_ref.rollout.n_gpus_per_node=3",
        "actor_rollout_ref.rollout.name=hf", "trainer.device=cpu"])
    role_worker_mapping, pool_spec, mapping = build_role_mapping(config)
    assert Role.ActorRollout not in role_worker_mapping
    assert mapping[Role.Actor] == "global_pool" and mapping[Role.Rollout] == "rollout_pool"
    assert pool_spec == {"global_pool": [2], "rollout_pool": [3, 3]}
    assert actor_role(role_worker_mapping) == Role.Actor


def test_sync_and_colocate_keep_the_hybrid_engine():
    for mode in ("sync", "colocate_async"):
        config = compose_config("ppo_trainer", [f"trainer.v1.trainer_mode={mode}", "actor_rollout_ref.rollout.name=hf"])
        role_worker_mapping, pool_spec, mapping = build_role_mapping(config)
        assert mapping[Role.ActorRollout] == "global_pool" and Role.Rollout not in mapping
        assert list(pool_spec) == ["global_pool"]


def test_the_rollout_group_answers_generation():
    actor, rollout, manager = object(), object(), object()
    assert WorkerGroups(actor_rollout=actor).rollout is actor
    assert WorkerGroups(actor_rollout=actor, standalone_rollout=rollout).rollout is rollout
    assert WorkerGroups(actor_rollout=actor, standalone_rollout=rollout, rollout_manager=manager).rollout is manager
