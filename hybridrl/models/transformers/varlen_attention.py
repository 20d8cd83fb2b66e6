"""Varlen attention for packed rows without a dense mask: torch SDPA per packed sequence.

The packed forward (``use_remove_padding``, :mod:`hybridrl.utils.remove_padding`) feeds the model one ``[1, nnz]``
row whose ``position_ids`` restart at 0 for each sequence. With transformers' ``sdpa`` attention,
``masking_utils`` turns that into a dense block-diagonal causal mask of ``nnz × nnz`` and SDPA scores every
pair, so the attention costs ``nnz²`` instead of ``Σ L_i²`` (finding 1 of
benchmarks/results/2026-12-06-performance-findings.md). flash-attn's varlen kernels avoid that on GPU; on CPU this
module does it with plain torch:

    mask function ``varlen_mask``: no mask at all when the call has no padding mask and no KV cache
        (a packed row or a single unpadded sequence); otherwise transformers' ``sdpa_mask`` unchanged;
    attention ``varlen_attention_forward``: with no mask, split the row at the restarts of
        ``position_ids`` and run ``scaled_dot_product_attention(is_causal=True)`` on each sequence;
        with a mask (padded batches, generation with a cache) transformers' ``sdpa_attention_forward``.

Both are registered with transformers under ``hybridrl_varlen`` (:func:`register_varlen_attention`), and
:func:`use_varlen_attention` switches a loaded model that runs ``sdpa`` to it (``load_hf_model`` does, unless
an attention implementation is asked for, e.g. ``flash_attention_2`` on GPU). Models with sliding-window
layers keep the dense mask (the per-sequence kernel has no window). ``torch.nn.attention.flex_attention``
with a document mask was measured as the alternative: torch 2.13 has no flex-attention backward on CPU.

bf16/fp16 calls on CPU with short query blocks (``T ≤ UPCAST_MAX_QUERY``: a short packed sequence, the
shared-prompt update's response pass, a decode step) run SDPA on float32 copies of query, key and value and cast
the result back (:func:`sdpa_forward`): PyTorch's CPU flash-attention kernel is 2.5–3.8× slower in bf16 than in
fp32 at those lengths, forward and backward
(benchmarks/results/2026-12-05-perf-fused-adamw-and-fp32-attention-in-the-bf16.md); longer blocks keep the bf16
kernel, the faster one there. The results are SDPA's in fp32, cast once.

CPU calls that will be differentiated (the update's forward), of 2 to ``GROUPED_MAX_QUERY`` queries, run
:func:`~hybridrl.models.transformers.grouped_attention.grouped_attention` instead, in any dtype: the same
attention as two batched matmuls per key-value head with a recomputing backward, 1.2-1.9x faster than the flash
kernel forward + backward at those lengths
(benchmarks/results/2026-12-05-perf-blocked-log-probs-and-grouped-attention-in-the.md).

Notation:
    B: batch (1 for a packed row), H / Hkv: query / key-value heads, T: tokens, D: head dim,
    L_i: length of packed sequence i.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hybridrl.models.transformers.grouped_attention import MAX_SCORE_ELEMENTS, additive_mask, grouped_attention

__all__ = [
    "GROUPED_MAX_QUERY",
    "HALF_DTYPES",
    "VARLEN_ATTN",
    "UPCAST_MAX_QUERY",
    "can_swap_attention",
    "grouped_attention_applies",
    "half_sdpa_in_fp32",
    "packed_attention_kwargs",
    "packed_sequence_bounds",
    "register_varlen_attention",
    "sdpa_forward",
    "use_varlen_attention",
    "varlen_attention_forward",
    "varlen_causal_attention",
    "varlen_mask",
]

VARLEN_ATTN = "hybridrl_varlen"
# CPU bf16/fp16 attention runs in fp32 up to this many query positions per call (measured: fp32 is 1.7-3.8x faster
# forward + backward at 1-63 queries, bf16 faster from ~95 on; 4th-gen Xeon with AMX, 2 threads)
UPCAST_MAX_QUERY = 64
HALF_DTYPES = (torch.bfloat16, torch.float16)
# CPU calls that will be differentiated run the grouped-matmul kernel up to this many queries (measured: forward +
# backward 1.2-1.9x faster than the flash kernel at 15-127 queries, slower from ~190 on; 0 turns it off)
GROUPED_MAX_QUERY = 128
# attention kwargs that change the scores: calls carrying one keep SDPA
_SCORE_MODIFIERS = ("softcap", "position_bias", "s_aux", "sinks")


def grouped_attention_applies(
    query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None, dropout: float, kwargs: dict
) -> bool:
    """Whether a call runs :func:`~hybridrl.models.transformers.grouped_attention.grouped_attention` instead of SDPA:
    a CPU call
    that will be differentiated, of 2..``GROUPED_MAX_QUERY`` queries, no dropout, a mask SDPA-shaped for all
    heads (``[b, 1, Q, K]``) or none, no score modifiers, and scores within ``MAX_SCORE_ELEMENTS``."""
    if not (query.device.type == "cpu" and torch.is_grad_enabled() and query.requires_grad):
        return False
    batch, heads, queries, _ = query.shape
    if not 1 < queries <= GROUPED_MAX_QUERY or dropout or heads % key.shape[1]:
        return False
    if attention_mask is not None and (attention_mask.dim() != 4 or attention_mask.shape[1] != 1
                                       or attention_mask.requires_grad):
        return False
    if any(kwargs.get(name) is not None for name in _SCORE_MODIFIERS):
        return False
    return batch * heads * queries * key.shape[2] <= MAX_SCORE_ELEMENTS


def _grouped_sdpa(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
    scaling: float | None, is_causal: bool,
) -> torch.Tensor:
    """SDPA's semantics (a mask, or SDPA's causal flag when there is none) on the grouped kernel: ``[B, H, Q, D]``."""
    bias, live = additive_mask(attention_mask, query.shape[2], key.shape[2], is_causal and attention_mask is None,
                               query.device)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return grouped_attention(query, key, value, bias, scale, live)


def half_sdpa_in_fp32(query: torch.Tensor) -> bool:
    """Whether an SDPA call on ``query [B, H, T, D]`` runs on float32 copies: CPU, bf16/fp16, ``T`` short."""
    return query.device.type == "cpu" and query.dtype in HALF_DTYPES and query.shape[-2] <= UPCAST_MAX_QUERY


def sdpa_forward(
    module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    attention_mask: torch.Tensor | None, upcast: bool | None = None, **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa_attention_forward``, on float32 copies of a half-precision call where ``upcast``
    (None: :func:`half_sdpa_in_fp32`); returns ``(out [B, T, H, D], None)`` in the query's dtype."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if upcast is None and grouped_attention_applies(query, key, attention_mask, kwargs.get("dropout", 0.0), kwargs):
        is_causal = kwargs.get("is_causal")
        out = _grouped_sdpa(query, key, value, attention_mask, kwargs.get("scaling"),
                            getattr(module, "is_causal", True) if is_causal is None else is_causal)
        return out.transpose(1, 2).contiguous(), None
    if upcast is None:
        upcast = half_sdpa_in_fp32(query)
    if not upcast or query.dtype not in HALF_DTYPES:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    out, weights = sdpa_attention_forward(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)
    return out.to(query.dtype), weights


def packed_sequence_bounds(position_ids: torch.Tensor) -> list[int]:
    """Cumulative sequence lengths ``[0, L_0, L_0+L_1, ..., T]`` of one packed row.

    A sequence starts wherever ``position_ids [T]`` does not grow by one (transformers'
    ``find_packed_sequence_indices`` rule), so ``[0 1 2 0 1 0]`` gives ``[0, 3, 5, 6]``.
    """
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[1:] = position_ids[1:] != position_ids[:-1] + 1
    return [*torch.nonzero(starts).flatten().tolist(), position_ids.shape[0]]


def varlen_causal_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bounds: list[int],
    scaling: float | None = None, dropout: float = 0.0,
) -> torch.Tensor:
    """Causal attention inside each packed sequence of one row, nothing across sequences.

    Args:
        query: ``[1, H, T, D]``; key, value: ``[1, Hkv, T, D]`` (``H`` a multiple of ``Hkv``: GQA).
        bounds: cumulative lengths from :func:`packed_sequence_bounds`.
        scaling: softmax scale (None: ``D ** -0.5``); dropout: attention dropout probability.

    Returns:
        ``[1, H, T, D]``, differentiable with respect to query, key and value.
    """
    lengths = [end - start for start, end in zip(bounds[:-1], bounds[1:])]
    # split (one concatenation in backward), not slices (each slice's backward fills a full-size zero gradient)
    outputs = [
        _causal_sdpa(q, k, v, scaling, dropout)
        for q, k, v in zip(query.split(lengths, dim=2), key.split(lengths, dim=2), value.split(lengths, dim=2))
    ]
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)


def _causal_sdpa(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None, dropout: float
) -> torch.Tensor:
    """Causal SDPA of one sequence ``[1, H, L, D]`` (the grouped kernel where :func:`grouped_attention_applies`,
    else on fp32 copies where :func:`half_sdpa_in_fp32`)."""
    if grouped_attention_applies(query, key, None, dropout, {}):
        return _grouped_sdpa(query, key, value, None, scaling, is_causal=True)
    upcast = half_sdpa_in_fp32(query)
    q, k, v = (t.float() for t in (query, key, value)) if upcast else (query, key, value)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=query.shape[1] != key.shape[1]
    )
    return out.to(query.dtype)


def varlen_attention_forward(
    module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    attention_mask: torch.Tensor | None, **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention interface: ``q [B, H, T, D]``, ``k, v [B, Hkv, T, D]`` → ``([B, T, H, D], None)``.

    With no mask and no cache (``T`` queries over ``T`` keys), the sequences come from ``cu_seq_lens_q``
    (``[N+1]``, passed by hybridrl's packed forward, one row) or else from ``position_ids`` (which the decoder
    layers pass on); packed rows run :func:`varlen_causal_attention`, everything else transformers' SDPA.
    """
    bounds = _packed_bounds(query, key, attention_mask, module, kwargs)
    if not any(len(row) > 2 for row in bounds):  # one sequence per row: SDPA's own is_causal path
        return sdpa_forward(module, query, key, value, attention_mask, **kwargs)
    scaling, dropout = kwargs.get("scaling"), kwargs.get("dropout", 0.0)  # the layer passes 0 in eval mode
    rows = [
        varlen_causal_attention(query[b : b + 1], key[b : b + 1], value[b : b + 1], row, scaling, dropout)
        for b, row in enumerate(bounds)
    ]
    out = rows[0] if len(rows) == 1 else torch.cat(rows, dim=0)
    return out.transpose(1, 2).contiguous(), None


def _packed_bounds(
    query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None, module: nn.Module, kwargs: dict
) -> list[list[int]]:
    """Per row of ``query``, the cumulative lengths of its packed sequences; ``[]`` when the call is not a
    mask-free, cache-free causal one (then nothing is packed)."""
    if attention_mask is not None or not query.shape[2] == key.shape[2] > 1 or not getattr(module, "is_causal", True):
        return []
    cu_seq_lens = kwargs.get("cu_seq_lens_q")
    if cu_seq_lens is not None and query.shape[0] == 1:
        return [torch.unique_consecutive(cu_seq_lens).tolist()]  # empty sequences repeat a bound
    position_ids = kwargs.get("position_ids")
    if position_ids is None or position_ids.dim() != 2:
        return []
    return [packed_sequence_bounds(row) for row in position_ids.expand(query.shape[0], -1)]


def _has_sliding_window(config: Any) -> bool:
    """Whether some layer of the model attends within a sliding window (such layers keep the dense mask)."""
    layer_types = getattr(config, "layer_types", None) or ()
    return "sliding_attention" in layer_types or getattr(config, "sliding_window", None) is not None


def varlen_mask(
    batch_size: int, q_length: int, kv_length: int, q_offset: Any = 0, kv_offset: int = 0,
    attention_mask: torch.Tensor | None = None, config: Any = None, **kwargs: Any,
) -> torch.Tensor | None:
    """transformers mask interface: None (no mask is built) for calls without a padding mask or a KV cache,
    where :func:`varlen_attention_forward` finds the sequences itself; transformers' ``sdpa_mask`` otherwise."""
    from transformers.masking_utils import sdpa_mask

    no_cache = isinstance(q_offset, int) and q_offset == 0 and kv_offset == 0 and q_length == kv_length
    if attention_mask is None and no_cache and not _has_sliding_window(config):
        return None
    return sdpa_mask(
        batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset, kv_offset=kv_offset,
        attention_mask=attention_mask, config=config, **kwargs,
    )


def mask_interface_matches() -> bool:
    """Whether transformers' mask functions take ``q_length`` (5.x), the signature :func:`varlen_mask` implements;
    transformers 4.x (the Megatron environment) passes ``cache_position`` instead, so its models keep ``sdpa``."""
    import inspect

    from transformers.masking_utils import sdpa_mask

    return "q_length" in inspect.signature(sdpa_mask).parameters


def register_varlen_attention() -> str:
    """Register ``hybridrl_varlen`` (attention + mask function) with transformers; returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(VARLEN_ATTN, varlen_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(VARLEN_ATTN, varlen_mask)
    return VARLEN_ATTN


def can_swap_attention(model: nn.Module, current: tuple[str, ...] = ("sdpa",)) -> bool:
    """Whether ``model``'s attention may be swapped for one of hybridrl's: a text model on transformers 5.x that runs
    transformers' attention interface (``_supports_attention_backend``) with an attention among ``current``.
    Eager, flash-attention, flex and Ulysses models keep theirs, and multimodal configs (whose masks carry extra
    overlays) are left alone."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) not in current or not mask_interface_matches():
        return False
    return getattr(model, "_supports_attention_backend", False) and not hasattr(config, "vision_config")


def use_varlen_attention(model: nn.Module) -> bool:
    """Switch a loaded HF model from ``sdpa`` to ``hybridrl_varlen`` (where ``can_swap_attention``); returns whether
    it did."""
    if not can_swap_attention(model):
        return False
    model.set_attn_implementation(register_varlen_attention())  # warns and keeps sdpa if the class cannot switch
    return model.config._attn_implementation == VARLEN_ATTN


def packed_attention_kwargs(model: nn.Module, cu_seqlens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Extra forward kwargs for a packed row: ``cu_seq_lens_q [N+1]`` when ``model`` (plain, FSDP2 or FSDP1
    wrapped) runs ``hybridrl_varlen``; nothing for other attentions (flash-attention finds them itself)."""
    inner = getattr(model, "module", model)
    config = getattr(inner, "config", None)
    if getattr(config, "_attn_implementation", None) != VARLEN_ATTN:
        return {}
    return {"cu_seq_lens_q": cu_seqlens}
