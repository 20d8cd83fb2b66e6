"""Attention of a bf16/fp16 CPU rollout computed in float32.

PyTorch's CPU flash-attention kernel is several times slower in bf16 than in fp32 for a decode step's shapes
(one query position against the cache): SmolLM2, 32 rows, 80 cached positions, 2 threads: 1.49 ms a layer in bf16,
0.23 ms in fp32. That made a bf16 rollout no faster than an fp32 one on CPUs with bf16 matmul units, although its
linear layers run 2.2× faster. ``fp32_attention(model)`` switches the model, for the duration of a decode call, to
``hybridrl_sdpa_fp32``: transformers' own SDPA attention on float32 copies of query, key and value, cast back to
the model's dtype (0.38 ms a layer; the copies are small next to the weights). Results are those of SDPA in fp32:
at least as accurate as the bf16 kernel.

Only CPU text models on transformers 5.x whose attention is ``sdpa`` or ``hybridrl_varlen`` (which runs SDPA on a
decode's masked, cached calls: an actor-built engine model has it) and whose weights are bf16/fp16 switch; anything
else keeps its attention. The model's own attention is restored after the call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from hybridrl.models.transformers.varlen_attention import HALF_DTYPES, VARLEN_ATTN, can_swap_attention, sdpa_forward

UPCAST_ATTN = "hybridrl_sdpa_fp32"
_SDPA_BASED = ("sdpa", VARLEN_ATTN)  # attentions whose decode calls are transformers' SDPA


def upcast_sdpa_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa_attention_forward`` on float32 ``query [B, H, Q, D]``, ``key``/``value [B, KV, K, D]``,
    whatever ``Q`` (a prefill too). Returns ``(out [B, Q, H, D], None)`` in the query's dtype, as the wrapped
    function does."""
    return sdpa_forward(module, query, key, value, attention_mask, upcast=True, **kwargs)


def register_upcast_attention() -> str:
    """Register ``hybridrl_sdpa_fp32`` (attention + transformers' SDPA mask function); returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(UPCAST_ATTN, upcast_sdpa_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(UPCAST_ATTN, sdpa_mask)
    return UPCAST_ATTN


def wants_upcast_attention(model: nn.Module) -> bool:
    """Whether ``model`` is a CPU bf16/fp16 text model running ``sdpa`` (or ``hybridrl_varlen``) attention."""
    if not can_swap_attention(model, _SDPA_BASED):
        return False
    param = next(model.parameters(), None)
    return param is not None and param.device.type == "cpu" and param.dtype in HALF_DTYPES


@contextlib.contextmanager
def fp32_attention(model: nn.Module, enabled: bool = True) -> Iterator[bool]:
    """Within the block, a CPU bf16/fp16 SDPA-based model computes attention in fp32 (yields whether it does)."""
    if not (enabled and wants_upcast_attention(model)):
        yield False
        return
    original = model.config._attn_implementation
    model.set_attn_implementation(register_upcast_attention())
    try:
        yield model.config._attn_implementation == UPCAST_ATTN
    finally:
        model.set_attn_implementation(original)
