"""Full and sharded state dicts of FSDP2 / FSDP1 / plain modules.

Hazard this module exists for: ``get_model_state_dict(..., full_state_dict=True, cpu_offload=True)``
returns the tensors on rank 0 only (other ranks get ``{}``); a rank that then indexes it raises while
rank 0 waits in the next collective, and the job hangs. :func:`iter_full_state_dict` gathers one
tensor at a time with ``DTensor.full_tensor()``, so every rank receives every full tensor.

Names are the HF model's ``state_dict()`` keys (FSDP adds no prefixes; tied weights appear under
both names, as in HF).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from hybridrl.workers.engine.fsdp import fsdp_version


def _sharded_options(**kwargs: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=False, cpu_offload=True, **kwargs)


def _full_tensor(value: torch.Tensor) -> torch.Tensor:
    """All-gather a DTensor into a plain tensor on every rank (plain tensors pass through)."""
    from torch.distributed.tensor import DTensor

    if not isinstance(value, DTensor):
        return value
    sharded: Any = value
    mesh_device = sharded.device_mesh.device_type
    if sharded.device.type != mesh_device:  # CPU-offloaded shard on an NCCL mesh: stage on the device
        sharded = sharded.to(mesh_device)
    return sharded.full_tensor()


def iter_full_state_dict(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, full tensor)`` for every entry of the model's state dict, on every rank.

    Collective: all ranks must consume the whole iterator in the same order. FSDP2 gathers tensor by
    tensor (peak memory: one full tensor); FSDP1 gathers the whole dict first. Tensors stay on the
    device they were gathered on (``cpu`` on a gloo mesh). A tensor may alias the module's own storage
    (world size 1, plain modules): copy it before modifying it.
    """
    version = fsdp_version(module)
    if version == 1:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # cpu_offload=False: FSDP1's offload_to_cpu crashes on CPU, and True keeps tensors on rank 0 only.
        full: dict[str, Any] = get_model_state_dict(
            module, options=StateDictOptions(full_state_dict=True, cpu_offload=False)
        )
        yield from full.items()
        return
    for name, value in module.state_dict().items():
        yield name, _full_tensor(value)


def get_full_state_dict(module: nn.Module, *, to_cpu: bool = True) -> dict[str, torch.Tensor]:
    """The full state dict on every rank, as copies (never aliasing the module); on CPU when ``to_cpu``."""
    out = {}
    for name, tensor in iter_full_state_dict(module):
        out[name] = tensor.detach().to("cpu" if to_cpu else tensor.device, copy=True)
    return out


def load_full_state_dict(module: nn.Module, state_dict: Mapping[str, torch.Tensor], strict: bool = True) -> None:
    """Load a full (unsharded) state dict, present on every rank, into a plain or FSDP module."""
    if fsdp_version(module) == 0:
        module.load_state_dict(dict(state_dict), strict=strict)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(module, dict(state_dict), options=StateDictOptions(full_state_dict=True, strict=strict))


# ----------------------------------------------------------------------------- sharded (checkpoint) state


def get_sharded_model_state_dict(module: nn.Module) -> dict[str, Any]:
    """This rank's shard: DTensor values (FSDP2) / ShardedTensor (FSDP1) / plain tensors, on CPU."""
    if fsdp_version(module) == 0:
        return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module, options=_sharded_options())


def set_sharded_model_state_dict(module: nn.Module, state_dict: Mapping[str, Any]) -> None:
    """Load the shard written by :func:`get_sharded_model_state_dict` (same world size and mesh)."""
    if fsdp_version(module) == 0:
        module.load_state_dict(dict(state_dict))
        return
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(module, dict(state_dict), options=_sharded_options())


def get_sharded_optimizer_state_dict(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """This rank's optimizer state, keyed by parameter name (torch.distributed.checkpoint convention)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(module, optimizer, options=_sharded_options())


def set_sharded_optimizer_state_dict(
    module: nn.Module, optimizer: torch.optim.Optimizer, state_dict: Mapping[str, Any]
) -> None:
    """Load the optimizer state written by :func:`get_sharded_optimizer_state_dict`."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(module, optimizer, dict(state_dict), options=_sharded_options())
