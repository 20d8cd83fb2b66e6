"""Which CUDA kernels ``scaled_dot_product_attention`` may use in hybridrl's GPU processes.

cuDNN's fused attention became SDPA's preferred CUDA backend for masked attention in recent PyTorch releases. On Hopper
(H100/H200) its backward returns NaN query gradients when an explicit ``attn_mask`` is given, the sequence length is
64 past a multiple of 128 (64, 192, 320, ...) and some query row's log-sum-exp is below about -88.7 — which every
fully masked row of a left-padded batch satisfies (pytorch/pytorch#196678; huggingface/trl#7181). The forward is
fine, so it shows up only as ``actor/grad_norm: nan`` and skipped steps. hybridrl's GPU kit hit it on an H200 with
torch 2.11 (padded actor update, 32 + 32 tokens).

hybridrl therefore turns cuDNN attention off in every CUDA process it sets up (``init_distributed``); PyTorch then picks
FlashAttention (no mask) or the memory-efficient kernel (with a mask), both correct there. ``HYBRIDRL_CUDNN_SDPA=1``
keeps cuDNN on (for a PyTorch with the fix, or to measure it); ``0`` or unset turns it off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

CUDNN_SDPA_ENV_VAR = "HYBRIDRL_CUDNN_SDPA"
_ON, _OFF = ("1", "true", "on", "yes"), ("", "0", "false", "off", "no")


def cudnn_sdpa_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``$HYBRIDRL_CUDNN_SDPA`` asks to keep cuDNN attention (default: no).

    Raises:
        ValueError: for a value that is neither on (1/true/on/yes) nor off (0/false/off/no/empty).
    """
    value = environ.get(CUDNN_SDPA_ENV_VAR, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(
        f"{CUDNN_SDPA_ENV_VAR}={value!r}: use 1 to keep cuDNN attention or 0 (the default) to turn it off."
    )


def configure_sdpa_backends(environ: Mapping[str, str] = os.environ) -> bool:
    """Enable or disable SDPA's cuDNN backend for this process per ``$HYBRIDRL_CUDNN_SDPA``; return the new state.

    The other backends (flash, memory-efficient, math) are left as they are.
    """
    keep = cudnn_sdpa_requested(environ)
    torch.backends.cuda.enable_cudnn_sdp(keep)
    return keep
