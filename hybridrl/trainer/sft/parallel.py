"""Data- and sequence-parallel layout of the SFT trainer (verl 0.5's ``(dp, sp)`` mesh).

    world W = dp · sp;  rank = dp_rank · sp + sp_rank      (SP groups are consecutive ranks: build_sp_group)

    rank:      0   1 | 2   3          (W = 4, sp = 2)
    dp_rank:   0   0 | 1   1          data loaders shard by dp_rank: an SP group loads the same samples
    sp_rank:   0   1 | 0   1          each runs a 1/sp slice of every packed micro batch (Ulysses)

FSDP shards parameters over all W ranks and averages gradients over W (see ``loss.py`` for the scaling).
Scalars that every rank of an SP group holds alike (loss sums, token counts) are summed over dp ranks by
:func:`sum_over_dp_ranks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hybridrl.models.transformers.ulysses_attention import register_ulysses_attention
from hybridrl.utils import ulysses
from hybridrl.workers.sharding_manager.fsdp_ulysses import build_sp_group

__all__ = ["ParallelLayout", "build_layout", "sum_over_dp_ranks"]


@dataclass(frozen=True)
class ParallelLayout:
    """This rank's place in the ``(dp, sp)`` layout; ``sp_group`` is None without sequence parallelism."""

    dp_size: int
    dp_rank: int
    sp_size: int
    sp_rank: int
    sp_group: Any = None

    def attention_implementation(self) -> str | None:
        """Register and return ``ulysses_sdpa`` under SP; None (the model's own attention) without it."""
        return register_ulysses_attention() if self.sp_group is not None else None

    def mark(self, module: nn.Module) -> nn.Module:
        """Attach the SP group to the wrapped model (its attention then runs Ulysses); returns ``module``."""
        if self.sp_group is not None:
            ulysses.mark_sequence_parallel(module, self.sp_group)
        return module


def build_layout(sp_size: int) -> ParallelLayout:
    """The layout of this rank; collective (every rank creates the SP groups) when ``sp_size > 1``."""
    world, rank = dist.get_world_size(), dist.get_rank()
    group = build_sp_group(sp_size) if sp_size > 1 else None
    return ParallelLayout(world // sp_size, rank // sp_size, sp_size, rank % sp_size, group)


def sum_over_dp_ranks(value: torch.Tensor, layout: ParallelLayout) -> torch.Tensor:
    """Sum of a tensor over the dp ranks (a copy), given that the ranks of each SP group hold it alike.

    Only SP rank 0 of each group contributes to the all-reduce over the W ranks, so every dp rank is
    counted once (the per-token losses are all-gathered before they are summed: the group's values agree).
    """
    value = value.detach().clone()
    if dist.is_initialized() and dist.get_world_size() > 1:
        if layout.sp_rank != 0:
            value.zero_()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value
