"""The forward's execution knobs shared by the actor, the critic and the reward model: the compute-dtype context
(autocast on CUDA only), ``use_torch_compile`` with an eager fallback, ``model.enable_activation_offload``."""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch

from hybridrl.config.errors import warn_once

__all__ = ["activation_offload_context", "compute_dtype_context", "maybe_compile"]


def compute_dtype_context(device_name: str) -> contextlib.AbstractContextManager[Any]:
    """verl runs forwards under ``autocast(bf16)``; on CPU that would silently change fp32 numerics,
    so autocast is used on CUDA only (the FSDP mixed-precision policy sets the CPU compute dtype)."""
    if device_name == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def maybe_compile(fn: Callable[..., torch.Tensor], enabled: bool, device_name: str) -> Callable[..., torch.Tensor]:
    """``torch.compile(fn, dynamic=True)`` for ``use_torch_compile`` (verl), with an eager fallback.

    CUDA: compiled. CPU: eager unless ``HYBRIDRL_COMPILE_ON_CPU=1`` — inductor's C++ build costs tens of
    seconds per process and buys nothing on the tiny CPU models (numerics are equal; see the knob tests).
    If compilation fails at the first call, the eager function is used from then on (one warning).
    """
    if not enabled or (device_name != "cuda" and os.environ.get("HYBRIDRL_COMPILE_ON_CPU", "0") != "1"):
        return fn
    compiled = torch.compile(fn, dynamic=True)
    state = {"fn": compiled}

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> torch.Tensor:
        try:
            return state["fn"](*args, **kwargs)
        except Exception as error:  # noqa: BLE001  (compiler/toolchain errors of any kind)
            if state["fn"] is fn:
                raise
            warnings.warn(
                f"use_torch_compile: compiling {fn.__name__} failed ({error!r}); running it eagerly.", stacklevel=2
            )
            state["fn"] = fn
            return fn(*args, **kwargs)

    return call


def activation_offload_context(enabled: bool, device_name: str) -> contextlib.AbstractContextManager[Any]:
    """``model.enable_activation_offload``: tensors saved for backward live in pinned CPU memory
    (``torch.autograd.graph.save_on_cpu``) and return to the GPU for backward. On CPU activations are
    already in host memory, so it is a no-op (warned once)."""
    if not enabled:
        return contextlib.nullcontext()
    if device_name != "cuda":
        warn_once("enable_activation_offload=True has no effect on CPU: activations already live in host memory.")
        return contextlib.nullcontext()
    return torch.autograd.graph.save_on_cpu(pin_memory=True)
