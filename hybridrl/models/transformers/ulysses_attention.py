"""Ulysses attention (``ulysses_sdpa``): a transformers attention implementation for sequence parallelism.

Each rank of an SP group holds a ``1/sp`` slice of the packed row (:mod:`hybridrl.utils.ulysses` slices the
inputs, gathers the outputs and attaches the group to the model). Inside attention an all-to-all swaps the split::

    q, k, v  [B, H, S/sp, D]  --all_to_all(scatter heads, gather seq)-->  [B, H/sp, S, D]
    varlen attention over the whole packed sequence (per-sequence SDPA, bounds from the gathered position ids)
    out      [B, H/sp, S, D]  --all_to_all(scatter seq, gather heads)-->  [B, H, S/sp, D]

Modules not marked with an SP group (e.g. the rollout engine's own model built from the same config) run
:mod:`hybridrl.models.transformers.varlen_attention`, whose mask function this implementation shares (no dense
mask for packed rows).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hybridrl.models.transformers import varlen_attention
from hybridrl.utils.ulysses import all_to_all_tensor, sequence_parallel_group_of

__all__ = ["ULYSSES_ATTN", "register_ulysses_attention", "ulysses_attention_forward"]

ULYSSES_ATTN = "ulysses_sdpa"


def _repeat_heads(x: torch.Tensor, repeats: int) -> torch.Tensor:
    return x if repeats == 1 else x.repeat_interleave(repeats, dim=1)


def ulysses_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention interface: ``q [B, H, S/sp, D]``, ``k, v [B, Hkv, S/sp, D]`` → ``[B, S/sp, H, D]``.

    Unmarked modules (no SP group) run :func:`varlen_attention.varlen_attention_forward` (SDPA; varlen on packed rows).
    """
    group = sequence_parallel_group_of(module)
    if group is None or dist.get_world_size(group) == 1:
        return varlen_attention.varlen_attention_forward(module, query, key, value, attention_mask, **kwargs)
    sp = dist.get_world_size(group)
    heads = query.shape[1]
    if heads % sp:
        raise ValueError(f"Ulysses: {heads} attention heads are not divisible by ulysses_sequence_parallel_size={sp}")
    key, value = _repeat_heads(key, heads // key.shape[1]), _repeat_heads(value, heads // value.shape[1])
    q, k, v = (all_to_all_tensor(t, 1, 2, group) for t in (query, key, value))  # [B, H/sp, S, D]
    position_ids = kwargs.get("position_ids")
    if position_ids is None:
        raise ValueError("Ulysses attention needs position_ids (the packed use_remove_padding forward passes them)")
    parts = [torch.empty_like(position_ids) for _ in range(sp)]
    dist.all_gather(parts, position_ids.contiguous(), group=group)
    bounds = varlen_attention.packed_sequence_bounds(torch.cat(parts, dim=-1)[0])
    out = varlen_attention.varlen_causal_attention(q, k, v, bounds, kwargs.get("scaling"), kwargs.get("dropout", 0.0))
    out = all_to_all_tensor(out, 2, 1, group)  # [B, H, S/sp, D]
    return out.transpose(1, 2).contiguous(), None


def register_ulysses_attention() -> str:
    """Register ``ulysses_sdpa`` (attention + the varlen mask function) with transformers; returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(ULYSSES_ATTN, ulysses_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ULYSSES_ATTN, varlen_attention.varlen_mask)
    return ULYSSES_ATTN
