"""megatron-core's model-parallel groups on top of the worker's ``torch.distributed`` group.

Rank layout (megatron-core's default order ``tp-cp-ep-dp-pp``): TP ranks are adjacent, so with
``tensor_model_parallel_size=2`` on 4 ranks, ranks {0, 1} and {2, 3} are TP groups and the data-parallel
index of rank ``r`` is ``r // 2`` (PP = CP = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

__all__ = ["MegatronRankInfo", "init_megatron_parallel", "megatron_grid_exists", "rank_info"]


@dataclass(frozen=True)
class MegatronRankInfo:
    """Where this rank sits in the megatron-core grid."""

    tp_rank: int
    tp_size: int
    dp_rank: int
    dp_size: int
    pp_rank: int
    pp_size: int
    cp_rank: int
    cp_size: int

    @property
    def is_collect_rank(self) -> bool:
        """The one rank per data-parallel slice whose outputs the driver keeps (TP 0, CP 0, last PP stage)."""
        return self.tp_rank == 0 and self.cp_rank == 0 and self.pp_rank == self.pp_size - 1


def init_megatron_parallel(megatron_config: Any, device_name: str) -> MegatronRankInfo:
    """Create the TP/PP/CP/EP/DP groups (once per process) and seed megatron-core's RNG tracker.

    ``megatron_config`` is an ``actor_rollout_ref.actor.megatron``-shaped section. On CPU the patches of
    :mod:`hybridrl.workers.megatron.cpu_patches` are applied first. ``torch.distributed`` must be initialised.
    """
    if device_name == "cpu":
        from hybridrl.workers.megatron.cpu_patches import apply_cpu_patches

        apply_cpu_patches()
    from megatron.core import parallel_state, tensor_parallel

    if not dist.is_initialized():
        raise RuntimeError("init_megatron_parallel needs torch.distributed initialised (the worker does it)")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=int(megatron_config.tensor_model_parallel_size),
            pipeline_model_parallel_size=int(megatron_config.pipeline_model_parallel_size),
            virtual_pipeline_model_parallel_size=_optional_int(megatron_config.virtual_pipeline_model_parallel_size),
            context_parallel_size=int(megatron_config.context_parallel_size),
            expert_model_parallel_size=int(megatron_config.expert_model_parallel_size),
            expert_tensor_parallel_size=_optional_int(megatron_config.expert_tensor_parallel_size),
        )
    else:
        _check_same_grid(megatron_config)
    tensor_parallel.model_parallel_cuda_manual_seed(int(megatron_config.seed))
    return rank_info()


def megatron_grid_exists() -> bool:
    """Whether this process already holds megatron-core's parallel groups (made by a colocated worker)."""
    from megatron.core import parallel_state

    return parallel_state.model_parallel_is_initialized()


def _check_same_grid(megatron_config: Any) -> None:
    """One process holds one megatron-core grid: workers colocated in it (actor, critic, reward model on one
    resource pool) must ask for the same TP/PP/CP sizes; the second one cannot get its own."""
    from megatron.core import parallel_state as ps

    held = {"tensor_model_parallel_size": ps.get_tensor_model_parallel_world_size(),
            "pipeline_model_parallel_size": ps.get_pipeline_model_parallel_world_size(),
            "context_parallel_size": ps.get_context_parallel_world_size()}
    wanted = {key: int(megatron_config[key]) for key in held}
    if wanted != held:
        raise ValueError(
            f"megatron: this process already holds a megatron-core grid {held}, another worker in it asks for "
            f"{wanted}. Workers colocated on one resource pool share the grid: set their *.megatron parallel sizes "
            "equal, or give the critic / reward model its own pool (critic.enable_resource_pool, "
            "reward_model.enable_resource_pool)."
        )


def _optional_int(value: Any) -> int | None:
    """``None`` for null (and for the string ``"None"``, verl 0.5's default of ``ref.megatron.expert_tensor_parallel_size``)."""
    return None if value is None or value == "None" else int(value)


def rank_info() -> MegatronRankInfo:
    """This rank's :class:`MegatronRankInfo` (after :func:`init_megatron_parallel`)."""
    from megatron.core import parallel_state as ps

    return MegatronRankInfo(
        tp_rank=ps.get_tensor_model_parallel_rank(),
        tp_size=ps.get_tensor_model_parallel_world_size(),
        dp_rank=ps.get_data_parallel_rank(),
        dp_size=ps.get_data_parallel_world_size(),
        pp_rank=ps.get_pipeline_model_parallel_rank(),
        pp_size=ps.get_pipeline_model_parallel_world_size(),
        cp_rank=ps.get_context_parallel_rank(),
        cp_size=ps.get_context_parallel_world_size(),
    )
