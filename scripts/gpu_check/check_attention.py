"""Check ``attention``: masked SDPA backward is finite with the backends hybridrl configures (``cuda_attention.py``).

A left-padded causal batch in bf16 (row r starts with ``r`` pad tokens, so the first query rows of padded sequences see
no key at all) goes forward and backward through ``scaled_dot_product_attention`` with an explicit boolean mask, at
sequence lengths 64, 128 and 192 (64 past a multiple of 128 is where cuDNN's Hopper backward breaks). Measured twice:

    configured = after ``configure_sdpa_backends()`` (what every hybridrl CUDA process runs under)
    cudnn      = cuDNN attention forced (``sdpa_kernel(CUDNN_ATTENTION)``), recorded to show whether the bug is there

PASS: every gradient of the configured run is finite at every length. The cuDNN figures are information only (a PyTorch
with the fix makes them finite). On the CPU dry run the configured run is the math backend; cuDNN is a SKIP.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from gpu_check.outcome import Outcome
from hybridrl.utils.cuda_attention import configure_sdpa_backends

SEQ_LENGTHS = (64, 128, 192)
BATCH, HEADS, HEAD_DIM = 4, 8, 64


def left_padded_causal_mask(batch: int, length: int, device: str) -> torch.Tensor:
    """``[B, 1, L, L]`` bool: causal, and row ``r`` masks its first ``r`` keys (its pad tokens)."""
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    keys = torch.arange(length, device=device)
    real = keys[None, :] >= torch.arange(batch, device=device)[:, None]  # [B, L]: key is not a pad
    return (causal[None] & real[:, None, :])[:, None]


def nonfinite_gradients(length: int, device: str, backend: Any = None, seed: int = 0) -> int:
    """Non-finite entries among dq, dk, dv of one masked SDPA forward/backward (bf16 on CUDA, fp32 on CPU)."""
    from torch.nn.attention import sdpa_kernel

    generator = torch.Generator(device=device).manual_seed(seed)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    q, k, v = (torch.randn(BATCH, HEADS, length, HEAD_DIM, device=device, dtype=dtype, generator=generator)
               .requires_grad_() for _ in range(3))  # fmt: skip
    mask = left_padded_causal_mask(BATCH, length, device)
    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out.backward(torch.randn(out.shape, device=device, dtype=dtype, generator=generator))
    return sum(int((~torch.isfinite(t.grad)).sum()) for t in (q, k, v))


def run(context: dict[str, Any]) -> Outcome:
    device = context["device"]
    cudnn_kept = configure_sdpa_backends() if device == "cuda" else None
    configured = {length: nonfinite_gradients(length, device) for length in SEQ_LENGTHS}
    figures: dict[str, Any] = {"seq_lengths": list(SEQ_LENGTHS), "cudnn_sdp_kept": cudnn_kept,
                               "nonfinite_grads_configured": configured}  # fmt: skip
    if device == "cuda":
        from torch.nn.attention import SDPBackend

        try:
            figures["nonfinite_grads_cudnn"] = {
                length: nonfinite_gradients(length, device, SDPBackend.CUDNN_ATTENTION) for length in SEQ_LENGTHS
            }
        except RuntimeError as error:  # no cuDNN attention for this shape/GPU: nothing to compare
            figures["nonfinite_grads_cudnn"] = f"cuDNN attention unavailable: {str(error)[:200]}"
        figures["torch_cudnn_version"] = torch.backends.cudnn.version()
    if any(configured.values()):
        return Outcome("FAIL", f"masked SDPA backward has non-finite gradients: {configured}", figures)
    if device != "cuda":
        return Outcome("SKIP", f"no CUDA: math backend finite at {list(SEQ_LENGTHS)}; cuDNN needs the GPU", figures)
    return Outcome("PASS", f"masked bf16 SDPA backward finite at lengths {list(SEQ_LENGTHS)} (cuDNN kept: {cudnn_kept});"
                           f" with cuDNN forced: {figures['nonfinite_grads_cudnn']} non-finite", figures)  # fmt: skip
