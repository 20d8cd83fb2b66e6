"""Log-probs of chosen tokens from logits, in cache-sized row blocks, forward and backward.

The actor's loss needs ``log p(y_t)`` at temperature ``τ`` for each scored position. Written as torch ops,

    x = logits.float() / τ;   log p = x[y] - logsumexp(x)

materialises ``x`` (``[N, V]`` float32: 800 MB at N = 4064, V = 49 152), and autograd's backward of the four
ops runs several more whole-tensor passes over ``[N, V]`` buffers (the scatter's zero fill, the softmax, the sum
of the two gradients, the division, the cast back): memory-bound work that took ~0.8 s of a 7 s bf16 update on
a 2-core CPU (benchmarks/results/2026-12-05-perf-blocked-log-probs-and-grouped-attention-in-the.md).
:func:`token_logprobs` computes the same values block by block: each block of rows is upcast, scaled, reduced and
dropped while it is still in cache, and only ``logsumexp [N]`` is kept for backward, which rebuilds each block's
softmax and writes the gradient of the logits once, in their dtype:

    forward   lse_i = logsumexp_v(x_iv),            out_i = x_{i y_i} - lse_i
    backward  ∂out_i/∂logits_iv = (1[v = y_i] - softmax(x_i)_v) / τ

Between forward and backward it holds the logits in their own dtype (400 MB in bf16 at the shape above, where the
unfused ops held their 800 MB float32 copy) and ``lse``.

Notation: N scored positions (rows), V vocabulary.
"""

from __future__ import annotations

import torch

__all__ = ["token_logprobs", "token_sum_pi_squared"]

# elements of one float32 block: 2^20 (4 MiB) keeps a block and its temporaries within a core's L2
_BLOCK_ELEMENTS = 1 << 20


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log softmax(logits / temperature)[labels]`` in float32, without whole-tensor temporaries.

    Args:
        logits: ``[..., V]``, any floating dtype; gradients flow back to it in its dtype.
        labels: ``[...]`` token ids.
        temperature: the divisor of the logits (``rollout.temperature``), > 0.

    Returns:
        ``[...]`` float32 log-probabilities; equal to the unfused ops up to float summation order.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}")
    lead_shape = logits.shape[:-1]
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1, 1).to(torch.int64)
    return _TokenLogProbs.apply(flat_logits, flat_labels, 1.0 / temperature).view(lead_shape)


def token_sum_pi_squared(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``Σ_v softmax(logits / temperature)_v²`` in float32, block by block (no ``[N, V]`` float32 copy; no gradient).

    Σ_v π(v)² = exp(logsumexp(2x) − 2·logsumexp(x)) with ``x = logits / temperature``: the optimal token baseline's
    variance proxy, computed next to :func:`token_logprobs` in the log-prob pass.

    Args:
        logits: ``[..., V]``, any floating dtype.
        temperature: the divisor of the logits (``rollout.temperature``), > 0.

    Returns:
        ``[...]`` float32, in ``[1/V, 1]``.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for Σπ², got {temperature}")
    lead_shape = logits.shape[:-1]
    flat_logits = logits.detach().reshape(-1, logits.shape[-1])
    rows, vocab = flat_logits.shape
    out = torch.empty(rows, dtype=torch.float32, device=logits.device)
    step = _block_rows(vocab)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        block = _scaled_block(flat_logits, start, stop, 1.0 / temperature)
        log_normaliser = torch.logsumexp(block, dim=-1)
        # Σ_v π_v² = Σ_v exp(2 x_v) / (Σ_v exp x_v)²
        out[start:stop] = torch.exp(torch.logsumexp(block.mul_(2.0), dim=-1) - 2.0 * log_normaliser)
    return out.view(lead_shape)


def _block_rows(vocab: int) -> int:
    """Rows per block: as many as fit ``_BLOCK_ELEMENTS``, at least one."""
    return max(1, _BLOCK_ELEMENTS // max(vocab, 1))


def _scaled_block(logits: torch.Tensor, start: int, stop: int, scale: float) -> torch.Tensor:
    """Rows ``[start, stop)`` as a fresh float32 block, times ``scale``."""
    block = logits[start:stop].to(torch.float32, copy=True)
    if scale != 1.0:
        block.mul_(scale)
    return block


class _TokenLogProbs(torch.autograd.Function):
    """logits ``[N, V]``, labels ``[N, 1]`` → log-probs ``[N]`` (float32); see the module docstring."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, scale: float) -> torch.Tensor:  # type: ignore[override]
        rows, vocab = logits.shape
        out = torch.empty(rows, dtype=torch.float32, device=logits.device)
        lse = torch.empty(rows, dtype=torch.float32, device=logits.device)
        step = _block_rows(vocab)
        for start in range(0, rows, step):
            stop = min(start + step, rows)
            block = _scaled_block(logits, start, stop, scale)
            torch.logsumexp(block, dim=-1, out=lse[start:stop])
            out[start:stop] = block.gather(1, labels[start:stop]).squeeze(1) - lse[start:stop]
        ctx.save_for_backward(logits, labels, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        logits, labels, lse = ctx.saved_tensors
        rows, vocab = logits.shape
        grad_logits = torch.empty_like(logits)
        grad_out = grad_out.to(torch.float32)
        step = _block_rows(vocab)
        for start in range(0, rows, step):
            stop = min(start + step, rows)
            block = _scaled_block(logits, start, stop, ctx.scale)
            weight = grad_out[start:stop, None]  # [b, 1]
            # -softmax · g, then +g at the label: d out / d x = onehot - softmax
            block.sub_(lse[start:stop, None]).exp_().mul_(weight.neg())
            block.scatter_add_(1, labels[start:stop], weight)
            if ctx.scale != 1.0:
                block.mul_(ctx.scale)
            grad_logits[start:stop] = block
        return grad_logits, None, None
