"""Attention as two batched matmuls per key-value head, for CPU training-size calls.

PyTorch's CPU flash-attention kernel is slow at the shapes of RL updates on small models (hundreds of queries,
head dim 64): SmolLM2's response pass of 32 rows × 127 queries over 172 keys takes 47 ms forward + backward per
layer in bf16 and 41 ms in fp32 on 2 cores, this module 40 and 30 ms; at 15 queries over 62 keys 4.1 / 3.7 ms
against 2.5 / 1.9 (benchmarks/results/2026-12-05-perf-blocked-log-probs-and-grouped-attention-in-the.md). It computes

    S = scale · Q Kᵀ + bias,   P = softmax(S),   O = P V

with the ``g = H / Hkv`` query heads that share a key-value head stacked into one matrix (no ``repeat_kv``
copy of keys and values, bigger matmuls), in float32 whatever the input dtype (as the flash kernel accumulates),
and a backward that recomputes ``P`` from the saved inputs instead of keeping it, so the memory held between
forward and backward is that of the flash kernel (inputs and output):

    dV = Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP − rowsum(dO ∘ O)),   dQ = scale · dS K,   dK = scale · dSᵀ Q

One call materialises ``S`` and ``P`` for a moment (``[B, H, Q, K]`` float32 each); calls above
``MAX_SCORE_ELEMENTS`` go to SDPA instead.

Notation: B batch, H / Hkv query / key-value heads, g = H / Hkv, Q queries, K keys, D head dim.
"""

from __future__ import annotations

import torch

__all__ = ["MAX_SCORE_ELEMENTS", "additive_mask", "grouped_attention"]

# B·H·Q·K of one call: 2^24 float32 scores = 64 MiB for S (and as much for P) while the call runs
MAX_SCORE_ELEMENTS = 1 << 24


def additive_mask(
    mask: torch.Tensor | None, queries: int, keys: int, is_causal: bool, device: torch.device
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """SDPA's mask as a float32 bias ``[b, 1, Q, K]`` (0 where attended, a large negative number elsewhere) and
    the rows that attend to nothing.

    ``mask``: boolean (True = attend) or additive float, ``[b, 1, Q, K]`` or ``[Q, K]``; ``None`` with
    ``is_causal``: SDPA's top-left aligned causal mask; ``None`` otherwise: no bias.

    Returns:
        ``(bias, live)``: ``live`` is a float32 ``[b, 1, Q, 1]`` of 1 for rows with an attended key and 0 for
        fully masked rows (a boolean mask's left-padding queries), whose output SDPA sets to 0; ``None`` when
        every row attends somewhere.
    """
    if mask is None:
        if not is_causal:
            return None, None
        mask = torch.ones(queries, keys, dtype=torch.bool, device=device).tril()
    if mask.dim() == 2:
        mask = mask[None, None]
    if mask.dtype != torch.bool:
        return mask.to(torch.float32), None
    bias = torch.zeros(mask.shape, dtype=torch.float32, device=device).masked_fill_(~mask, torch.finfo(torch.float32).min)
    live = mask.any(dim=-1, keepdim=True)
    return bias, (None if bool(live.all()) else live.to(torch.float32))


def grouped_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None, scale: float,
    live: torch.Tensor | None = None,
) -> torch.Tensor:
    """``softmax(scale · Q Kᵀ + bias) V``, computed in float32.

    Args:
        query: ``[B, H, Q, D]``; key, value: ``[B, Hkv, K, D]`` with ``H`` a multiple of ``Hkv``.
        bias: float32 ``[B or 1, 1, Q, K]`` (:func:`additive_mask`) or None; not differentiated.
        scale: the softmax scale (``D ** -0.5`` for SDPA's default).
        live: float32 ``[B or 1, 1, Q, 1]``, 0 on rows whose output (and gradient) is 0; None: every row.

    Returns:
        ``[B, H, Q, D]`` in the query's dtype; differentiable in query, key and value.
    """
    return _GroupedAttention.apply(query, key, value, bias, live, scale)


def _grouped_scores(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None, live: torch.Tensor | None,
                    scale: float, heads: int) -> torch.Tensor:
    """``P [B, Hkv, g·Q, K]`` from float32 ``q [B, Hkv, g·Q, D]``, ``k [B, Hkv, K, D]``."""
    batch, kv_heads, rows, keys = q.shape[0], k.shape[1], q.shape[2], k.shape[2]
    group = heads // kv_heads
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(scale)
    if bias is not None:
        scores.view(batch, kv_heads, group, rows // group, keys).add_(bias.unsqueeze(2))
    probs = torch.softmax(scores, dim=-1)
    if live is not None:
        probs.view(batch, kv_heads, group, rows // group, keys).mul_(live.unsqueeze(2))
    return probs


def _as_groups(x: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """``[B, H, Q, D]`` → float32 ``[B, Hkv, g·Q, D]`` (heads of a group stacked along the rows)."""
    batch, heads, queries, dim = x.shape
    return x.to(torch.float32).reshape(batch, kv_heads, heads // kv_heads * queries, dim)


class _GroupedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, bias, live, scale):  # type: ignore[override]
        heads, kv_heads = query.shape[1], key.shape[1]
        q, k, v = _as_groups(query, kv_heads), key.to(torch.float32), value.to(torch.float32)
        out = torch.matmul(_grouped_scores(q, k, bias, live, scale, heads), v)  # [B, Hkv, g·Q, D]
        ctx.save_for_backward(query, key, value, bias, live, out)
        ctx.scale = scale
        return out.view(query.shape).to(query.dtype)

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        query, key, value, bias, live, out = ctx.saved_tensors
        heads, kv_heads, scale = query.shape[1], key.shape[1], ctx.scale
        q, k, v = _as_groups(query, kv_heads), key.to(torch.float32), value.to(torch.float32)
        probs = _grouped_scores(q, k, bias, live, scale, heads)
        grad_o = _as_groups(grad_out, kv_heads)
        grad_v = torch.matmul(probs.transpose(-1, -2), grad_o)  # [B, Hkv, K, D]: sums over the group's heads
        grad_s = torch.matmul(grad_o, v.transpose(-1, -2))  # dP
        grad_s.sub_((grad_o * out).sum(dim=-1, keepdim=True)).mul_(probs).mul_(scale)  # scale · dS
        grad_q = torch.matmul(grad_s, k).view(query.shape)
        grad_k = torch.matmul(grad_s.transpose(-1, -2), q)
        return grad_q.to(query.dtype), grad_k.to(key.dtype), grad_v.to(value.dtype), None, None, None
