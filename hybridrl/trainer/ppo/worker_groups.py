"""The trainer's worker groups: one declared record, and the function that spawns them on the resource pools.

    role_worker_mapping ─┐
    per-role init kwargs ┼─► create_worker_groups ─► WorkerGroups(actor_rollout, critic, ref, rm)
    ResourcePoolManager ─┘     (one colocated RayWorkerGroup per pool; init_model with the actor last, as verl)

``WorkerGroups.ref`` is the group that answers ``compute_ref_log_prob``: a group of its own (``Role.RefPolicy``)
or the actor's group itself when the reference lives in the actor's process (``Role.ActorRolloutRef``, or LoRA:
the base model with the adapters off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, create_colocated_worker_cls
from hybridrl.trainer.ppo.protocols import ActorRolloutGroup, CriticGroup, RefGroup, RewardModelGroup, RolloutGroup
from hybridrl.trainer.ppo.roles import ResourcePoolManager, Role

__all__ = ["WorkerGroups", "actor_role", "create_worker_groups", "critic_has_own_pool"]

# init_model order: the actor last, so its rollout engine sees the memory the other models left (verl).
_INIT_ORDER = (Role.Critic, Role.RefPolicy, Role.RewardModel, Role.Rollout)


@dataclass(frozen=True)
class WorkerGroups:
    """The worker groups one PPO step calls (None: the role is not used in this run)."""

    actor_rollout: ActorRolloutGroup  # generate_sequences, compute_log_prob, update_actor, save/load_checkpoint
    critic: CriticGroup | None = None  # compute_values, update_critic
    ref: RefGroup | None = None  # compute_ref_log_prob (a RefPolicy group, or actor_rollout itself)
    rm: RewardModelGroup | None = None  # compute_rm_score
    # rollout.mode=async: the AgentLoopManager (server-mode rollout over actor_rollout's engines)
    rollout_manager: RolloutGroup | None = None
    # trainer.v1.trainer_mode=separate_async: the rollout workers on their own pool (role "rollout")
    standalone_rollout: RolloutGroup | None = None
    # distillation.enabled: the teachers (trainer/distillation/teachers.py), scoring the student's tokens
    teachers: Any = None

    @property
    def rollout(self) -> RolloutGroup:
        """What answers ``generate_sequences``: the agent-loop manager in server mode, the rollout's own group
        under separate_async, else the actor's group."""
        if self.rollout_manager is not None:
            return self.rollout_manager
        return self.standalone_rollout if self.standalone_rollout is not None else self.actor_rollout

    @property
    def use_critic(self) -> bool:
        return self.critic is not None

    @property
    def use_reference_policy(self) -> bool:
        return self.ref is not None

    @property
    def use_rm(self) -> bool:
        return self.rm is not None


def actor_role(role_worker_mapping: dict) -> Role:
    """``Role.ActorRolloutRef`` when the mapping has it (the reference in the actor's process), ``Role.Actor`` when
    the rollout has workers of its own (separate_async), else ``ActorRollout``."""
    for role in (Role.ActorRolloutRef, Role.ActorRollout, Role.Actor):
        if role in role_worker_mapping:
            return role
    return Role.ActorRollout


def critic_has_own_pool(resource_pool_manager: ResourcePoolManager) -> bool:
    """Split placement: the critic's resource pool differs from the actor's (their updates can overlap)."""
    mapping = getattr(resource_pool_manager, "mapping", {})
    return Role.Critic in mapping and mapping[Role.Critic] != mapping.get(actor_role(mapping))


def create_worker_groups(
    init_kwargs: dict[Role, dict[str, Any]],
    role_worker_mapping: dict[Role, type],
    resource_pool_manager: ResourcePoolManager,
    ray_worker_group_cls: type,
    device_name: str,
    use_reference_policy: bool,
) -> WorkerGroups:
    """Spawn a worker of ``role_worker_mapping[role](**init_kwargs[role])`` for every role in ``init_kwargs``
    (the resource pools must exist), run ``init_model`` (actor last), and return the groups.

    Args:
        init_kwargs: role → constructor keyword arguments of its worker class; its keys are the roles spawned.
        ray_worker_group_cls: the worker-group class (``RayWorkerGroup``), one instance per resource pool.
        use_reference_policy: without a ``Role.RefPolicy`` entry, the actor's group answers the reference calls.
    """
    class_dicts: dict[RayResourcePool, dict[str, RayClassWithInitArgs]] = {}  # pool → {role name: worker class}
    for role, kwargs in init_kwargs.items():
        pool = resource_pool_manager.get_resource_pool(role)
        class_dicts.setdefault(pool, {})[str(role)] = RayClassWithInitArgs(cls=role_worker_mapping[role], **kwargs)
    pool_names = {id(pool): name for name, pool in getattr(resource_pool_manager, "resource_pool_dict", {}).items()}
    spawned: dict[str, Any] = {}
    for pool, class_dict in class_dicts.items():
        wg_dict = ray_worker_group_cls(resource_pool=pool, ray_cls_with_init=create_colocated_worker_cls(class_dict),
                                       device_name=device_name)
        spawned.update(wg_dict.spawn(prefix_set=class_dict.keys()))
        print(f"[trainer] {pool_names.get(id(pool), 'pool')}: {', '.join(class_dict)} on "
              f"{wg_dict.world_size} rank(s)", flush=True)
    for role in _INIT_ORDER:
        if role in init_kwargs:
            spawned[str(role)].init_model()
    actor = spawned[str(actor_role(init_kwargs))]
    actor.init_model()
    ref = spawned.get(str(Role.RefPolicy), actor if use_reference_policy else None)
    return WorkerGroups(actor_rollout=actor, critic=spawned.get(str(Role.Critic)), ref=ref,
                        rm=spawned.get(str(Role.RewardModel)), standalone_rollout=spawned.get(str(Role.Rollout)))
