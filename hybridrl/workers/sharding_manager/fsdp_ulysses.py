"""Data layout for Ulysses sequence parallelism inside a worker group (verl's ``FSDPUlyssesShardingManager``).

The world of ``W`` ranks forms ``dp = W / sp`` groups of ``sp`` consecutive ranks (verl's ``(dp, sp)``
mesh: rank = dp_index · sp + sp_index). The single controller still hands every rank its own
``1/W`` chunk (``DP_COMPUTE_PROTO``); :meth:`UlyssesShardingManager.preprocess_data` all-gathers the
chunks of an SP group so its ranks work on the same ``sp/W`` of the batch (each on a slice of every
sequence), and :meth:`postprocess_data` hands each rank back the rows it was given. The result equals
verl's dispatch by dp rank with collection from ``sp_rank == 0``.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from hybridrl.protocol import DataProto

__all__ = ["UlyssesShardingManager", "build_sp_group", "sp_group_from_config"]


def build_sp_group(sp_size: int) -> Any:
    """This rank's SP process group (consecutive ranks); every rank must call it (``new_group`` is collective).

    Raises:
        ValueError: when ``sp_size`` does not divide the world size.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    if sp_size < 1 or world % sp_size:
        raise ValueError(f"ulysses_sequence_parallel_size={sp_size} must divide the worker world size {world}.")
    mine = None
    for start in range(0, world, sp_size):
        group = dist.new_group(list(range(start, start + sp_size)))
        if start <= rank < start + sp_size:
            mine = group
    return mine


def sp_group_from_config(section_config: Any, section: str) -> Any:
    """The SP group of a critic or reward-model worker, or None when its ``ulysses_sequence_parallel_size`` is 1.

    Args:
        section_config: the ``critic`` / ``reward_model`` section (``ulysses_sequence_parallel_size``,
            ``model.use_remove_padding``: Ulysses slices the packed row).
        section: the section's name, for the error message.

    Raises:
        ValueError: SP without ``use_remove_padding``, or a size that does not divide the world size.
    """
    sp_size = int(section_config.ulysses_sequence_parallel_size or 1)
    if sp_size <= 1:
        return None
    if not bool(section_config.model.use_remove_padding):
        raise ValueError(
            f"{section}.ulysses_sequence_parallel_size={sp_size} needs {section}.model.use_remove_padding=True "
            "(as in verl); set it, or the size to 1."
        )
    return build_sp_group(sp_size)


class UlyssesShardingManager:
    """Gather an SP group's data before a call and split the outputs after it.

    Args:
        group: the SP process group (from :func:`build_sp_group`); None means no sequence parallelism.
    """

    def __init__(self, group: Any) -> None:
        self.group = group
        self.sp_size = dist.get_world_size(group) if group is not None else 1
        self.sp_rank = dist.get_rank(group) if group is not None else 0

    def preprocess_data(self, data: DataProto) -> DataProto:
        """All ranks of the SP group get the concatenation of their chunks (in SP-rank order)."""
        if self.sp_size == 1:
            return data
        device = data.batch.device if data.batch is not None else None
        parts: list[Any] = [None] * self.sp_size
        dist.all_gather_object(parts, data.to("cpu"), group=self.group)
        gathered = DataProto.concat(parts)
        gathered.meta_info = dict(data.meta_info)
        return gathered.to(device) if device is not None else gathered

    def postprocess_data(self, data: DataProto) -> DataProto:
        """This rank's rows of an output computed on the gathered data."""
        if self.sp_size == 1:
            return data
        return data.chunk(self.sp_size)[self.sp_rank]
