"""Context parallelism (CP > 1) for the Megatron models: GPU only (TransformerEngine layer spec), never run yet.

megatron-core splits attention over the CP group only with TransformerEngine's attention (the local spec's
``DotProductAttention`` asserts ``context_parallel_size == 1`` and refuses ``packed_seq_params``), so this path
needs a GPU. :class:`hybridrl.workers.megatron.model.MegatronCausalLM` takes it when the CP size is > 1, as verl's
Megatron workers do (``preprocess_packed_seqs`` / ``postprocess_packed_seqs`` of ``verl/models/mcore/util.py``):

    caller's layout                  padded [B, S] + attention_mask, or packed [1, nnz] (positions restart at 0)
      → valid tokens, sequence after sequence; each sequence padded to a multiple of 2·CP·TP
      → this CP rank's local row [1, T / CP]: chunks r and 2·CP − 1 − r of every sequence
        (:mod:`hybridrl.utils.context_parallel`), PackedSeqParams(qkv_format="thd", cu_seqlens_padded)
      → GPTModel → local logits / values [1, T / CP, V] (gathered over TP first)
      → all-gather over the CP group, reassembled → the caller's layout ([B, S, V] or [1, nnz, V])

Every CP rank then holds the full output and computes the same loss; the backward of the gather keeps each rank's
own piece, times CP: megatron-core's DDP sums gradients over DP × CP and divides by DP × CP, and the CP ranks'
pieces add up to one full gradient, so the CP factor restores the DP average. CP ranks receive the same data as a
TP group does (the worker's dispatch gives every rank of a DP slice the same batch; outputs come from CP rank 0).

Unlike verl, which gathers per-token log-probs, this gathers the full logits ``[T, V]`` over CP (the caller's code
computes log-probs and entropies on full sequences unchanged): simpler, more memory per rank.
"""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.utils.context_parallel import (
    ContextParallelPlan,
    all_gather_pieces,
    merge_rank_pieces,
    plan_context_parallel,
    split_for_rank,
)

__all__ = ["ContextParallelInputs", "context_parallel_inputs", "context_parallel_size", "gather_outputs",
           "sequence_lengths"]


def context_parallel_size() -> int:
    """megatron-core's context-parallel world size (1 when its parallel state is not initialised)."""
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return 1
    return parallel_state.get_context_parallel_world_size()


def sequence_lengths(attention_mask: torch.Tensor | None, position_ids: torch.Tensor) -> list[int]:
    """Valid tokens per sequence: the rows of ``attention_mask [B, S]``, or the sequences of a packed row
    (``attention_mask=None``, ``position_ids [1, nnz]`` restarting at 0 at each sequence)."""
    if attention_mask is not None:
        return attention_mask.sum(dim=-1).tolist()
    starts = torch.nonzero(position_ids[0] == 0).flatten().tolist()
    return [end - start for start, end in zip(starts, [*starts[1:], position_ids.shape[1]])]


class ContextParallelInputs:
    """What this CP rank feeds ``GPTModel``: ``input_ids`` / ``position_ids [1, T / CP]``, ``packed_seq_params``,
    and the ``plan`` and caller's ``attention_mask`` (None: packed) to put the outputs back."""

    def __init__(self, input_ids: torch.Tensor, position_ids: torch.Tensor, packed_seq_params: Any,
                 plan: ContextParallelPlan, attention_mask: torch.Tensor | None) -> None:
        self.input_ids = input_ids
        self.position_ids = position_ids
        self.packed_seq_params = packed_seq_params
        self.plan = plan
        self.attention_mask = attention_mask


def context_parallel_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                            position_ids: torch.Tensor) -> ContextParallelInputs:
    """This CP rank's slice of a micro-batch in THD form.

    Args:
        input_ids: ``[B, S]`` (with ``attention_mask [B, S]``) or a packed row ``[1, nnz]`` (``attention_mask=None``,
            ``position_ids [1, nnz]`` restarting at 0).
        attention_mask: see ``input_ids``.
        position_ids: ``[B, S]`` or ``[1, nnz]``; only the packed row's sequence starts are read (megatron-core's
            rotary embedding takes the positions inside each sequence from ``cu_seqlens``).
    """
    from megatron.core import parallel_state as ps
    from megatron.core.packed_seq_params import PackedSeqParams

    lengths = sequence_lengths(attention_mask, position_ids)
    tokens = input_ids[attention_mask.bool()] if attention_mask is not None else input_ids[0]  # [nnz]
    # each rank's chunks divide by TP (megatron-core's sequence parallelism splits the local row over TP)
    plan = plan_context_parallel(lengths, ps.get_context_parallel_world_size(),
                                 align=ps.get_tensor_model_parallel_world_size())
    rank = ps.get_context_parallel_rank()
    positions = torch.cat([torch.arange(length, device=tokens.device) for length in lengths])  # [nnz]
    bounds = plan.cu_seqlens_padded(tokens.device)
    # padding sits at the end of each sequence, so with causal attention the valid tokens never see it
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=bounds, cu_seqlens_kv=bounds,
                             cu_seqlens_q_padded=bounds, cu_seqlens_kv_padded=bounds,
                             max_seqlen_q=plan.max_seqlen, max_seqlen_kv=plan.max_seqlen)
    return ContextParallelInputs(split_for_rank(tokens, plan, rank)[None], split_for_rank(positions, plan, rank)[None],
                                 params, plan, attention_mask)


def gather_outputs(local: torch.Tensor, inputs: ContextParallelInputs) -> torch.Tensor:
    """This rank's outputs ``[1, T / CP, ...]`` → every rank's, in the caller's layout: ``[B, S, ...]`` (zeros at
    padding) or ``[1, nnz, ...]``. Differentiable (this rank's piece, gradient times CP; see the module doc)."""
    from megatron.core import parallel_state as ps

    group = ps.get_context_parallel_group()
    pieces = all_gather_pieces(local[0], group, grad_scale=float(inputs.plan.cp_size))  # [CP, T / CP, ...]
    valid = merge_rank_pieces(pieces, inputs.plan)  # [nnz, ...]
    mask = inputs.attention_mask
    if mask is None:
        return valid[None]
    full = valid.new_zeros(*mask.shape, *valid.shape[1:])
    return full.index_put((mask.bool(),), valid)  # out of place: autograd flows into ``valid``
