"""Ulysses sequence parallelism (``ulysses_sequence_parallel_size``; needs ``use_remove_padding``).

The packed sequence ``[1, nnz]`` of a micro-batch is padded to a multiple of ``sp`` and each rank of
an SP group runs the model on its ``[1, nnz_pad / sp]`` slice. Everything outside attention is
per-token, so it needs nothing else; inside attention an all-to-all swaps the split::

    q, k, v  [B, H, S/sp, D]  --all_to_all(scatter heads, gather seq)-->  [B, H/sp, S, D]
    varlen attention over the whole packed sequence (per-sequence SDPA, bounds from the gathered position ids)
    out      [B, H/sp, S, D]  --all_to_all(scatter seq, gather heads)-->  [B, H, S/sp, D]

Per-token outputs (log-probs, entropies, values) are all-gathered back to ``[1, nnz]``
(:func:`gather_outputs_and_unpad`). Backward of that gather returns the rank's own slice times ``sp``:
the SP ranks all compute the same loss, FSDP averages gradients over ``dp·sp`` ranks, so the factor
makes the result the data-parallel average over ``dp`` groups (verl's ``grad_scaler``).

Works over gloo (``all_to_all_single`` is supported) and NCCL. This module holds the model-agnostic part:
re-partitioning, the differentiable collectives and the SP group attached to a model; the attention that uses
them (``ulysses_sdpa``, a transformers attention implementation) is in
:mod:`hybridrl.models.transformers.ulysses_attention`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "all_to_all_tensor",
    "gather_outputs_and_unpad",
    "mark_sequence_parallel",
    "pad_to_multiple",
    "sequence_parallel_group_of",
    "slice_for_rank",
    "sp_token_budget",
    "ulysses_pad_and_slice_inputs",
]

_GROUP_ATTR = "_hybridrl_ulysses_group"


# ----------------------------------------------------------------------------- pure re-partitioning


def pad_to_multiple(x: torch.Tensor, multiple: int, dim: int = -1, value: int | float = 0) -> tuple[torch.Tensor, int]:
    """Pad ``x`` along ``dim`` with ``value`` to a length divisible by ``multiple``; returns ``(x, pad)``."""
    length = x.shape[dim]
    pad = (multiple - length % multiple) % multiple
    if pad == 0:
        return x, 0
    shape = list(x.shape)
    shape[dim] = pad
    return torch.cat([x, torch.full(shape, value, dtype=x.dtype, device=x.device)], dim=dim), pad


def slice_for_rank(x: torch.Tensor, rank: int, world: int, dim: int = -1) -> torch.Tensor:
    """Rank ``rank``'s contiguous ``1/world`` of ``x`` along ``dim`` (length must divide evenly)."""
    length = x.shape[dim]
    if length % world:
        raise ValueError(f"slice_for_rank: length {length} is not divisible by {world}; pad first")
    part = length // world
    return x.narrow(dim, rank * part, part)


def ulysses_pad_and_slice_inputs(
    input_ids: torch.Tensor, position_ids: torch.Tensor | None, sp_size: int, sp_rank: int
) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """Pad packed ``[1, nnz]`` ids to a multiple of ``sp_size`` and take this rank's slice.

    Padding tokens get id 0 and position ids ``0..pad-1`` (a separate little sequence, so the
    block-diagonal mask keeps them away from real tokens), as in verl.

    Returns:
        ``(input_ids [1, nnz_pad/sp], position_ids [1, nnz_pad/sp] | None, pad)``.
    """
    padded_ids, pad = pad_to_multiple(input_ids, sp_size, dim=1)
    sliced_pos = None
    if position_ids is not None:
        if pad:
            extra = torch.arange(pad, device=position_ids.device, dtype=position_ids.dtype).unsqueeze(0)
            position_ids = torch.cat([position_ids, extra], dim=1)
        sliced_pos = slice_for_rank(position_ids, sp_rank, sp_size, dim=1)
    return slice_for_rank(padded_ids, sp_rank, sp_size, dim=1), sliced_pos, pad


def sp_token_budget(max_token_len: int | None, sp_size: int) -> int | None:
    """Token budget of a dynamic-bsz micro-batch: ``max_token_len_per_gpu × sp`` (an SP group shares its
    tokens, as verl); None (no budget configured) stays None."""
    return max_token_len * sp_size if isinstance(max_token_len, int) else max_token_len


def packed_causal_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """Block-diagonal causal mask ``[S, S]`` (True = attend) for packed sequences; a new sequence
    starts wherever ``position_ids`` (``[S]``) does not increase by one."""
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[1:] = position_ids[1:] != position_ids[:-1] + 1
    seq_id = torch.cumsum(starts.long(), dim=0)
    same = seq_id.unsqueeze(0) == seq_id.unsqueeze(1)
    return same & torch.ones_like(same).tril()


# ----------------------------------------------------------------------------- collectives with autograd


def _all_to_all(x: torch.Tensor, scatter_dim: int, gather_dim: int, group: Any) -> torch.Tensor:
    world = dist.get_world_size(group)
    inputs = [t.contiguous() for t in x.chunk(world, dim=scatter_dim)]
    stacked = torch.stack(inputs)  # [world, ...chunk]
    out = torch.empty_like(stacked)
    dist.all_to_all_single(out, stacked, group=group)
    return torch.cat(list(out.unbind(0)), dim=gather_dim).contiguous()


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scatter_dim: int, gather_dim: int, group: Any) -> torch.Tensor:
        ctx.dims, ctx.group = (scatter_dim, gather_dim), group
        return _all_to_all(x, scatter_dim, gather_dim, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        scatter_dim, gather_dim = ctx.dims
        return _all_to_all(grad, gather_dim, scatter_dim, ctx.group), None, None, None


def all_to_all_tensor(x: torch.Tensor, scatter_dim: int, gather_dim: int, group: Any) -> torch.Tensor:
    """Split ``x`` into ``sp`` chunks along ``scatter_dim``, send chunk ``j`` to rank ``j`` and concatenate
    what arrives along ``gather_dim`` (differentiable: the backward is the inverse all-to-all)."""
    return _AllToAll.apply(x, scatter_dim, gather_dim, group)


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, group: Any, grad_scaler: bool) -> torch.Tensor:
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        ctx.dim, ctx.rank, ctx.world, ctx.scale = dim, rank, world, grad_scaler
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        local = grad.chunk(ctx.world, dim=ctx.dim)[ctx.rank]
        return (local * ctx.world if ctx.scale else local).contiguous(), None, None, None


def gather_outputs_and_unpad(
    x: torch.Tensor, gather_dim: int, padding_size: int, group: Any, grad_scaler: bool = True
) -> torch.Tensor:
    """All-gather the SP slices of ``x`` along ``gather_dim`` and drop the last ``padding_size`` entries."""
    full = _Gather.apply(x, gather_dim, group, grad_scaler)
    if padding_size:
        full = full.narrow(gather_dim, 0, full.shape[gather_dim] - padding_size)
    return full


# ----------------------------------------------------------------------------- the SP group of a model


def mark_sequence_parallel(module: nn.Module, group: Any) -> None:
    """Attach the SP ``group`` to ``module`` and its attention layers (they then run Ulysses attention)."""
    for sub in module.modules():
        setattr(sub, _GROUP_ATTR, group)


def sequence_parallel_group_of(module: nn.Module) -> Any:
    """The SP group attached by :func:`mark_sequence_parallel` (None: no sequence parallelism)."""
    return getattr(module, _GROUP_ATTR, None)
