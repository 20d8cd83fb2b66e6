"""Roles of the PPO dataflow and the resource pools they run on (verl 0.5's ``Role`` and ``ResourcePoolManager``).

``str(role)`` is the role's worker-group prefix, its ``role=`` constructor argument and its timing
key: ``actor``, ``rollout``, ``actor_rollout``, ``critic``, ``ref``, ``rm``, ``actor_rollout_ref``.
``ResourcePoolManager`` turns ``{"global_pool": [n_gpus_per_node] * nnodes}`` into
``RayResourcePool`` objects, checks up front that the cluster can host all of them, and maps
each role to its pool. ``need_critic`` / ``need_reference_policy`` (defined in ``hybridrl.config.access``,
which validation uses before Ray starts) are re-exported here with ``need_reward_model``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import OmegaConf

from hybridrl.config.access import need_critic, need_reference_policy
from hybridrl.single_controller.ray import RayResourcePool
from hybridrl.single_controller.ray.errors import ResourceUnavailableError

__all__ = ["ResourcePoolManager", "Role", "need_critic", "need_reference_policy", "need_reward_model"]


class Role(Enum):
    """A model role in the PPO dataflow (values as in verl)."""

    Actor = 0
    Rollout = 1
    ActorRollout = 2
    Critic = 3
    RefPolicy = 4
    RewardModel = 5
    ActorRolloutRef = 6

    def __str__(self) -> str:
        return _ROLE_NAMES[self]

    @classmethod
    def from_string(cls, name: str) -> Role:
        """``"actor_rollout"`` → ``Role.ActorRollout`` (the inverse of ``str``)."""
        for role, role_name in _ROLE_NAMES.items():
            if role_name == name:
                return role
        raise ValueError(f"unknown role {name!r}; expected one of {sorted(_ROLE_NAMES.values())}")


_ROLE_NAMES = {
    Role.Actor: "actor",
    Role.Rollout: "rollout",
    Role.ActorRollout: "actor_rollout",
    Role.Critic: "critic",
    Role.RefPolicy: "ref",
    Role.RewardModel: "rm",
    Role.ActorRolloutRef: "actor_rollout_ref",
}


def _default_use_gpu() -> bool:
    """``trainer.device`` as the TaskRunner sees it (``HYBRIDRL_DEVICE``), else whether the cluster has GPUs."""
    device = os.environ.get("HYBRIDRL_DEVICE", "").strip().lower()
    if device in ("cpu", "cuda"):
        return device == "cuda"
    import ray

    return ray.is_initialized() and ray.cluster_resources().get("GPU", 0) > 0


@dataclass
class ResourcePoolManager:
    """Named resource pools and the role → pool mapping.

    Args:
        resource_pool_spec: pool name → processes (devices) per node, e.g. ``{"global_pool": [2, 2]}``.
        mapping: role → pool name.
        use_gpu: GPU bundles or CPU bundles; None: from ``HYBRIDRL_DEVICE`` (``trainer.device``) or the cluster.
        max_colocate_count: worker groups per device; 1 as in verl 0.5 (all roles of a pool share one
            colocated worker group).
    """

    resource_pool_spec: dict[str, list[int]]
    mapping: dict[Role, str]
    resource_pool_dict: dict[str, RayResourcePool] = field(default_factory=dict)
    use_gpu: bool | None = None
    max_colocate_count: int = 1

    def create_resource_pool(self) -> None:
        """Create every pool (placement groups are made on first use), after checking the cluster has room."""
        use_gpu = _default_use_gpu() if self.use_gpu is None else self.use_gpu
        for name, process_on_nodes in self.resource_pool_spec.items():
            self.resource_pool_dict[name] = RayResourcePool(
                process_on_nodes=process_on_nodes,
                use_gpu=use_gpu,
                max_colocate_count=self.max_colocate_count,
                name_prefix=name,
            )
        self._check_resource_available()

    def get_resource_pool(self, role: Role) -> RayResourcePool:
        if role not in self.mapping:
            raise KeyError(f"role {role} has no resource pool; mapping covers {[str(r) for r in self.mapping]}")
        return self.resource_pool_dict[self.mapping[role]]

    def get_n_gpus(self) -> int:
        """Devices (worker processes on CPU) over all pools."""
        return sum(n for process_on_nodes in self.resource_pool_spec.values() for n in process_on_nodes)

    def _check_resource_available(self) -> None:
        """Raise ``ResourceUnavailableError`` (a ``ValueError``) unless all pools fit the cluster's free resources."""
        from hybridrl.single_controller.ray.resource_pool import available_resources_per_node, check_pool_fits

        free = available_resources_per_node()
        checked: list[str] = []
        for name, pool in self.resource_pool_dict.items():
            try:
                check_pool_fits(name, pool.store, pool.bundle("cuda" if pool.use_gpu else "cpu"), free=free)
            except ResourceUnavailableError as error:
                hint = f" (after reserving room for the pools {checked} checked before it)" if checked else ""
                raise ResourceUnavailableError(f"{error}{hint}") from None
            checked.append(name)


def need_reward_model(config_or_mapping: Any) -> bool:
    """``reward_model.enable`` of a config, or (verl's signature) ``Role.RewardModel in role_worker_mapping``."""
    if isinstance(config_or_mapping, dict) and all(isinstance(k, Role) for k in config_or_mapping):
        return Role.RewardModel in config_or_mapping
    return bool(OmegaConf.select(config_or_mapping, "reward_model.enable", default=False))
