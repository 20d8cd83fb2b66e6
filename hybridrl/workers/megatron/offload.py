"""Megatron param / grad / optimizer offload between calls (verl 0.5's ``megatron.param_offload``,
``grad_offload``, ``optimizer_offload``).

What lives where on one rank (megatron-core DDP, :mod:`hybridrl.workers.megatron.engine`)::

    params      DDP buffer ``param_data`` (distributed optimizer: every trainable param is a view into it)
                or, without it, one storage per param; a frozen model (reference, reward model): one per param
    grads       DDP buffer ``grad_data`` (fp32; every param's ``main_grad`` is a view into it)
    optimizer   the torch optimizer's state (Adam moments, one storage per main param) and, for bf16 params,
                the fp32 main params (``shard_fp32_from_float16_groups`` / ``fp32_from_float16_groups``)

Offloading a storage copies it into a host tensor kept for the next time (pinned on CUDA) and resizes the device
storage to 0 bytes; every view into it (params, ``main_grad``, the distributed optimizer's shards) keeps its
identity and sees the data again after loading, which resizes the storage back and copies the host tensor in.
Grads are dropped instead of copied (the update zeroes them before its first backward) and come back zeroed, as in
verl and megatron-core's own ``offload_to_cpu``. The CPU is treated as the device too, so that the mechanism runs
(and is tested) there: the storages really shrink to 0 bytes and come back bit-identical.

verl 0.5 frees the grads together with the params (``param_offload``) and reads ``grad_offload`` without using
it; here ``grad_offload`` alone frees the grad buffers between updates as well.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from hybridrl.utils.device import empty_cache, get_device_name

__all__ = ["MegatronOffload", "OffloadFlags", "load_tensor", "model_grad_tensors", "model_param_tensors",
           "offload_tensor", "optimizer_tensors"]

_HOST = "_hybridrl_host_copy"  # attribute of an offloaded tensor: its host copy
_DROPPED = "_hybridrl_dropped_nbytes"  # attribute of a dropped grad buffer: its storage size


@dataclass(frozen=True)
class OffloadFlags:
    """The offload keys of one ``megatron`` section (a reference / reward model has ``param_offload`` only)."""

    params: bool = False
    grads: bool = False
    optimizer: bool = False

    @classmethod
    def of(cls, megatron_config: Any) -> OffloadFlags:
        def flag(key: str) -> bool:
            return bool(megatron_config[key]) if key in megatron_config else False

        return cls(flag("param_offload"), flag("grad_offload"), flag("optimizer_offload"))

    @property
    def frees_grads(self) -> bool:
        return self.params or self.grads


# ---------------------------------------------------------------------------------------------------- one tensor


def _on_this_device(tensor: torch.Tensor) -> bool:
    return tensor.device.type == get_device_name()


def _check_owns_storage(tensor: torch.Tensor, what: str) -> None:
    """Resizing a storage frees it for every tensor that views it: only a tensor covering its whole storage may."""
    covers = (tensor.storage_offset() == 0 and tensor.is_contiguous()
              and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size())
    if not covers:
        raise RuntimeError(f"megatron offload: {what} (shape {tuple(tensor.shape)}) is a view into a larger storage; "
                           "offloading it would free the other tensors in that storage. Set the offload keys False.")


@torch.no_grad()
def offload_tensor(tensor: torch.Tensor, what: str = "tensor") -> int:
    """Copy ``tensor`` into its host copy (allocated once, pinned on CUDA) and free its device storage; returns the
    bytes freed (0: already offloaded, or not on this process's device)."""
    storage = tensor.untyped_storage()
    if not _on_this_device(tensor) or storage.nbytes() == 0:
        return 0
    _check_owns_storage(tensor, what)
    if not storage.resizable():  # e.g. optimizer state read from a checkpoint file: give it a storage of its own
        tensor.set_(tensor.detach().clone())
        storage = tensor.untyped_storage()
    host = getattr(tensor, _HOST, None)
    if host is None or host.shape != tensor.shape or host.dtype != tensor.dtype:
        host = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=tensor.device.type == "cuda")
        setattr(tensor, _HOST, host)
    host.copy_(tensor)  # synchronous: the copy completes before the storage is freed
    nbytes = storage.nbytes()
    storage.resize_(0)
    return nbytes


@torch.no_grad()
def load_tensor(tensor: torch.Tensor) -> int:
    """Reallocate an offloaded tensor's storage and copy its host copy back; returns the bytes loaded."""
    host = getattr(tensor, _HOST, None)
    storage = tensor.untyped_storage()
    if host is None or storage.nbytes() > 0:
        return 0
    nbytes = host.numel() * host.element_size()
    storage.resize_(nbytes)
    tensor.copy_(host, non_blocking=True)  # stream-ordered before any later kernel on this device
    return nbytes


def _drop_tensor(tensor: torch.Tensor, what: str) -> int:
    """Free a grad buffer's storage without copying it; returns the bytes freed."""
    storage = tensor.untyped_storage()
    if not _on_this_device(tensor) or storage.nbytes() == 0:
        return 0
    _check_owns_storage(tensor, what)
    nbytes = storage.nbytes()
    setattr(tensor, _DROPPED, nbytes)
    storage.resize_(0)
    return nbytes


@torch.no_grad()
def _restore_zeroed(tensor: torch.Tensor) -> None:
    nbytes = getattr(tensor, _DROPPED, 0)
    if nbytes and tensor.untyped_storage().nbytes() == 0:
        tensor.untyped_storage().resize_(nbytes)
        tensor.zero_()


# ---------------------------------------------------------------------------------------------------- what to move


def _ddp_buffers(ddp: Any) -> list[Any]:
    return list(ddp.buffers) + list(getattr(ddp, "expert_parallel_buffers", []))


def model_param_tensors(model: Any) -> list[torch.Tensor]:
    """The storages holding a :class:`MegatronModel`'s params: DDP's ``param_data`` buffers (distributed optimizer),
    the params of buffers without one, and every param outside DDP's buffers (frozen ones; all of a frozen model's)."""
    tensors: list[torch.Tensor] = []
    in_buffers: set[int] = set()
    for buffer in _ddp_buffers(model.ddp) if model.ddp is not None else []:
        if buffer.param_data is not None:
            tensors.append(buffer.param_data)
            in_buffers.update(id(param) for param in buffer.params)
    seen_storages: set[int] = set()
    for param in model.gpt.parameters():
        pointer = param.untyped_storage().data_ptr()
        if id(param) in in_buffers or pointer in seen_storages:
            continue
        seen_storages.add(pointer)
        tensors.append(param)
    return tensors


def model_grad_tensors(model: Any) -> list[torch.Tensor]:
    """DDP's ``grad_data`` buffers (none for a frozen model)."""
    return [buffer.grad_data for buffer in _ddp_buffers(model.ddp)] if model.ddp is not None else []


def _inner_optimizers(megatron_optimizer: Any) -> list[Any]:
    return list(getattr(megatron_optimizer, "chained_optimizers", None) or [megatron_optimizer])


def optimizer_tensors(megatron_optimizer: Any) -> list[torch.Tensor]:
    """The optimizer's own storages: the fp32 main params of bf16/fp16 params and every state tensor of the torch
    optimizer (scalar ``step`` counters stay). Recomputed on each call: the state appears at the first step and a
    checkpoint load replaces it."""
    tensors: list[torch.Tensor] = []
    for inner in _inner_optimizers(megatron_optimizer):
        for attribute in ("shard_fp32_from_float16_groups", "fp32_from_float16_groups"):
            for group in getattr(inner, attribute, None) or []:
                tensors.extend(param for param in group if param is not None)
        torch_optimizer = getattr(inner, "optimizer", None)
        for state in (torch_optimizer.state.values() if torch_optimizer is not None else []):
            tensors.extend(value for value in state.values() if isinstance(value, torch.Tensor) and value.dim() > 0)
    return tensors


# ---------------------------------------------------------------------------------------------------- a worker's


class MegatronOffload:
    """The offload of one worker's model (and optimizer): :meth:`offload` after the build, :meth:`on_device` around
    each call that uses them.

    Args:
        model: this rank's :class:`MegatronModel`.
        optimizer: megatron-core's optimizer over it (None: a frozen model).
        flags: the section's :class:`OffloadFlags`.
    """

    def __init__(self, model: Any, optimizer: Any, flags: OffloadFlags) -> None:
        self.model, self.optimizer, self.flags = model, optimizer, flags
        self._params = model_param_tensors(model) if flags.params else []
        self._grads = model_grad_tensors(model) if flags.frees_grads else []

    @property
    def enabled(self) -> bool:
        return self.flags.params or self.flags.frees_grads or (self.flags.optimizer and self.optimizer is not None)

    def offload(self, optimizer_too: bool = True) -> int:
        """Free what the flags offload (the optimizer only with ``optimizer_too``); returns the bytes freed."""
        freed = sum(offload_tensor(tensor, "a parameter storage") for tensor in self._params)
        freed += sum(_drop_tensor(tensor, "a grad buffer") for tensor in self._grads)
        if optimizer_too and self.flags.optimizer and self.optimizer is not None:
            freed += sum(offload_tensor(tensor, "an optimizer tensor") for tensor in optimizer_tensors(self.optimizer))
        if freed:
            empty_cache()
        return freed

    def load(self, with_optimizer: bool) -> None:
        """Bring the params back; with ``with_optimizer`` (training) also the zeroed grads and the optimizer."""
        for tensor in self._params:
            load_tensor(tensor)
        if with_optimizer:
            for tensor in self._grads:
                _restore_zeroed(tensor)
            if self.flags.optimizer and self.optimizer is not None:
                for tensor in optimizer_tensors(self.optimizer):
                    load_tensor(tensor)

    @contextlib.contextmanager
    def on_device(self, with_optimizer: bool) -> Iterator[None]:
        """Params (+ grads and optimizer with ``with_optimizer``) on the device for one call, offloaded after."""
        if not self.enabled:
            yield
            return
        self.load(with_optimizer)
        try:
            yield
        finally:
            self.offload(optimizer_too=with_optimizer)
