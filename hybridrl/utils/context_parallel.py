"""Context parallelism (CP): which tokens of a packed batch each CP rank runs, and how the pieces go back together.

megatron-core's context parallelism (TransformerEngine's attention, ``qkv_format="thd"``) runs every sequence split
over the ``C`` ranks of a CP group. Each sequence is padded to a multiple of ``2·C`` (times an alignment, e.g. the
TP size for sequence parallelism) and cut into ``2·C`` equal chunks; CP rank ``r`` keeps chunks ``r`` and
``2·C − 1 − r``. Under causal attention late chunks cost more than early ones, so pairing an early with a late
chunk gives every rank the same work (TransformerEngine's load-balanced layout). With ``C = 2`` and a sequence of
8 tokens (chunks of 2)::

    tokens     t0 t1 | t2 t3 | t4 t5 | t6 t7
    chunk        0       1       2       3
    rank 0     t0 t1                   t6 t7        chunks 0 and 3
    rank 1             t2 t3   t4 t5                chunks 1 and 2

A rank's local row is, sequence after sequence, its two chunks of that sequence, so the local row of every rank is
``T / C`` long and its sequence boundaries are ``cu_seqlens_padded / C``. Everything here is index arithmetic on
the *padded packed row*: the sequences one after the other, each followed by its padding, ``T = Σ padded`` slots.

Notation:
    N: sequences, nnz: valid tokens (``Σ lengths``), T: slots of the padded packed row (``Σ padded lengths``),
    C: CP size, r: CP rank, ``...``: trailing feature dimensions (e.g. vocabulary logits).

Torch-only (``torch.distributed`` for :func:`all_gather_pieces`); megatron-core's side is
:mod:`hybridrl.workers.megatron.context_parallel`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["ContextParallelPlan", "all_gather_pieces", "local_slots", "merge_rank_pieces", "plan_context_parallel",
           "rank_chunks", "split_for_rank", "valid_slots"]


@dataclass(frozen=True)
class ContextParallelPlan:
    """How a batch of sequences is padded and split over a CP group of ``cp_size`` ranks."""

    lengths: tuple[int, ...]  # [N] valid tokens of each sequence
    padded_lengths: tuple[int, ...]  # [N] each a multiple of 2·C·align
    cp_size: int

    @property
    def total_padded(self) -> int:
        """``T``: slots of the padded packed row."""
        return sum(self.padded_lengths)

    @property
    def local_length(self) -> int:
        """``T / C``: length of each rank's local row."""
        return self.total_padded // self.cp_size

    @property
    def max_seqlen(self) -> int:
        """The longest padded sequence (``max_seqlen_q`` of megatron-core's ``PackedSeqParams``)."""
        return max(self.padded_lengths, default=0)

    def cu_seqlens_padded(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """``[N + 1]`` int32: start of each sequence in the padded packed row (``cu_seqlens_padded`` of THD)."""
        bounds = [0]
        for length in self.padded_lengths:
            bounds.append(bounds[-1] + length)
        return torch.tensor(bounds, dtype=torch.int32, device=device)


def plan_context_parallel(lengths: Sequence[int], cp_size: int, align: int = 1) -> ContextParallelPlan:
    """Pad each sequence length up to a multiple of ``2 · cp_size · align``.

    Args:
        lengths: ``[N]`` valid tokens per sequence (each ≥ 1).
        cp_size: ``C`` ≥ 1.
        align: extra factor (megatron-core's sequence parallelism needs each rank's chunks to divide by the TP size).

    Example: ``plan_context_parallel([5, 8], 2).padded_lengths == (8, 8)`` (multiples of 4).
    """
    if cp_size < 1 or align < 1:
        raise ValueError(f"cp_size={cp_size} and align={align} must be ≥ 1")
    multiple = 2 * cp_size * align
    padded = tuple(-(-int(length) // multiple) * multiple for length in lengths)  # ceil to a multiple
    return ContextParallelPlan(tuple(int(length) for length in lengths), padded, cp_size)


def rank_chunks(cp_size: int, cp_rank: int) -> tuple[int, int]:
    """The two chunks (of ``2·C`` per sequence) CP rank ``r`` keeps: ``(r, 2·C − 1 − r)``."""
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"cp_rank={cp_rank} is not in [0, {cp_size})")
    return cp_rank, 2 * cp_size - 1 - cp_rank


def local_slots(plan: ContextParallelPlan, cp_rank: int) -> torch.Tensor:
    """``[T / C]`` int64: the slots of the padded packed row that make CP rank ``r``'s local row, in its order
    (per sequence: chunk ``r``, then chunk ``2·C − 1 − r``)."""
    first, second = rank_chunks(plan.cp_size, cp_rank)
    pieces, start = [], 0
    for padded in plan.padded_lengths:
        chunk = padded // (2 * plan.cp_size)
        pieces.append(torch.arange(start + first * chunk, start + (first + 1) * chunk))
        pieces.append(torch.arange(start + second * chunk, start + (second + 1) * chunk))
        start += padded
    return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.long)


def valid_slots(plan: ContextParallelPlan) -> torch.Tensor:
    """``[nnz]`` int64: the slot of each valid token (sequence ``i``'s token ``j`` sits at ``start_i + j``)."""
    pieces, start = [], 0
    for length, padded in zip(plan.lengths, plan.padded_lengths):
        pieces.append(torch.arange(start, start + length))
        start += padded
    return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.long)


def split_for_rank(tokens: torch.Tensor, plan: ContextParallelPlan, cp_rank: int, pad_value: float = 0) -> torch.Tensor:
    """CP rank ``r``'s local row of per-token values.

    Args:
        tokens: ``[nnz, ...]`` the valid tokens' values, sequence after sequence (ids, positions, ...).
        plan: from :func:`plan_context_parallel` over the same sequences.
        cp_rank: ``r``.
        pad_value: the value of padding slots.

    Returns:
        ``[T / C, ...]``, same dtype and device.
    """
    full = tokens.new_full((plan.total_padded, *tokens.shape[1:]), pad_value)
    full[valid_slots(plan).to(tokens.device)] = tokens
    return full[local_slots(plan, cp_rank).to(tokens.device)]


def merge_rank_pieces(pieces: Sequence[torch.Tensor] | torch.Tensor, plan: ContextParallelPlan) -> torch.Tensor:
    """Inverse of :func:`split_for_rank` over the whole group: every rank's local row → the valid tokens' values.

    Args:
        pieces: ``C`` tensors ``[T / C, ...]`` (or one ``[C, T / C, ...]``), rank ``r``'s at index ``r``
            (what an all-gather over the CP group returns).
        plan: the plan the pieces were split with.

    Returns:
        ``[nnz, ...]``; differentiable in every piece (padding slots are dropped).
    """
    stacked = torch.stack(list(pieces)) if not isinstance(pieces, torch.Tensor) else pieces
    if stacked.shape[0] != plan.cp_size or stacked.shape[1] != plan.local_length:
        raise ValueError(f"expected {plan.cp_size} pieces of {plan.local_length} tokens, got {tuple(stacked.shape)}")
    slots = torch.cat([local_slots(plan, rank) for rank in range(plan.cp_size)]).to(stacked.device)
    # position p of the flattened pieces holds slot slots[p]; the inverse permutation reads slot s from place[s]
    place = torch.empty_like(slots)
    place[slots] = torch.arange(slots.numel(), device=slots.device)
    flat = stacked.reshape(plan.total_padded, *stacked.shape[2:])
    return flat[place[valid_slots(plan).to(stacked.device)]]


class _AllGatherPieces(torch.autograd.Function):
    """All-gather over a group; the gradient of the output goes back to this rank's own piece only, times a scale."""

    @staticmethod
    def forward(ctx, piece: torch.Tensor, group: dist.ProcessGroup | None, grad_scale: float) -> torch.Tensor:
        ctx.rank, ctx.grad_scale = dist.get_rank(group), grad_scale
        gathered = [torch.empty_like(piece) for _ in range(dist.get_world_size(group))]
        dist.all_gather(gathered, piece.contiguous(), group=group)
        return torch.stack(gathered)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return grad[ctx.rank] * ctx.grad_scale, None, None


def all_gather_pieces(piece: torch.Tensor, group: dist.ProcessGroup | None = None,
                      grad_scale: float = 1.0) -> torch.Tensor:
    """Every CP rank's local row, on every rank of ``group``: ``[T / C, ...]`` → ``[C, T / C, ...]``.

    Backward: each rank keeps the gradient of its own piece only (times ``grad_scale``). Every rank of the group
    computes the same loss on the same gathered outputs, so the gradients of the pieces, one per rank, add up over
    the group to the full gradient: the CP ranks' parameter gradients must be *summed* (megatron-core's DDP reduces
    over DP × CP and divides by DP × CP, hence ``grad_scale = C`` there).
    """
    return _AllGatherPieces.apply(piece, group, grad_scale)
