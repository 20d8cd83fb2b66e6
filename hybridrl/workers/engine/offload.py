"""Move FSDP parameters and optimizer state off the accelerator between calls, and back.

verl's ``fsdp_config.param_offload`` / ``optimizer_offload``: after each call the worker moves the
(sharded) weights / Adam moments to CPU so the rollout engine can use the GPU memory, and moves them
back before the next call. On CPU there is nothing to free, so every function here is a no-op when
the target and the current device are both the CPU. ``on_device`` brings both back for one call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from hybridrl.utils.device import empty_cache, get_device_name

_CPU = torch.device("cpu")


def _resolve(device: torch.device | str | None) -> torch.device:
    if device is None:
        name = get_device_name()
        return torch.device("cuda", torch.cuda.current_device()) if name == "cuda" else _CPU
    return torch.device(device)


@torch.no_grad()
def _move_module(module: nn.Module, device: torch.device) -> None:
    """Move the module's (sharded) parameters, grads and buffers to ``device``.

    FSDP2 and plain modules: ``module.to`` (FSDP2 keeps its sharded DTensor params registered).
    FSDP1: move each flat parameter's local shard, as verl does, so FSDP keeps pointing at it.
    """
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if not isinstance(module, FSDP):
        module.to(device, non_blocking=True)
        return
    for handle in module._all_handles:
        if handle._offload_params:  # torch's own CPUOffload already manages this shard
            continue
        flat_param = handle.flat_param
        handle.flat_param_to(device, non_blocking=True)
        flat_param._local_shard = flat_param.data


def offload_model(module: nn.Module) -> None:
    """Move the module's (sharded) parameters and grads to CPU and release cached device memory."""
    if get_device_name() == "cpu":
        return
    _move_module(module, _CPU)
    empty_cache()


def load_model(module: nn.Module, device: torch.device | str | None = None) -> None:
    """Move the module's parameters back to ``device`` (default: this process's accelerator)."""
    target = _resolve(device)
    if target.type == "cpu" and get_device_name() == "cpu":
        return
    _move_module(module, target)


def _move_optimizer(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.device != device and value.dim() > 0:
                state[key] = value.to(device, non_blocking=True)


def offload_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Move the optimizer state (Adam moments) to CPU; the scalar ``step`` tensors stay where they are."""
    if get_device_name() == "cpu" or not optimizer.state:
        return
    _move_optimizer(optimizer, _CPU)
    empty_cache()


def load_optimizer(optimizer: torch.optim.Optimizer, device: torch.device | str | None = None) -> None:
    """Move the optimizer state back to ``device`` (default: this process's accelerator)."""
    target = _resolve(device)
    if (target.type == "cpu" and get_device_name() == "cpu") or not optimizer.state:
        return
    _move_optimizer(optimizer, target)


@contextlib.contextmanager
def on_device(
    module: nn.Module | None,
    optimizer: torch.optim.Optimizer | None = None,
    param_offload: bool = False,
    optimizer_offload: bool = False,
) -> Iterator[None]:
    """Bring offloaded params / optimizer state to the device for one call and offload them after
    (``fsdp_config.param_offload`` / ``optimizer_offload``; no-ops on CPU)."""
    if param_offload and module is not None:
        load_model(module)
    if optimizer_offload and optimizer is not None:
        load_optimizer(optimizer)
    try:
        yield
    finally:
        if param_offload and module is not None:
            offload_model(module)
        if optimizer_offload and optimizer is not None:
            offload_optimizer(optimizer)
