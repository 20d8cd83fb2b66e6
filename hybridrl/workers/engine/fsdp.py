"""Wrap a HF model for sharded data-parallel training: FSDP2 (default) or FSDP1.

Composed from small steps, like torchtitan's ``parallelize.py``:

    mesh   = create_device_mesh(world_size, fsdp_config.fsdp_size)      # 1-D fsdp or 2-D (ddp, fsdp)
    module = apply_fsdp(module, fsdp_config, strategy="fsdp2", mixed_precision=..., device_mesh=mesh,
                        param_offload=False)
             └─ broadcast_module_from_rank0  (randomly initialised heads must agree before sharding)
             └─ fully_shard(decoder layer) for each layer, [untied embeddings], then fully_shard(root)

Tied input/output embeddings stay one parameter: both live in the root FSDP unit.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hybridrl.utils.device import get_device_id, get_device_name
from hybridrl.workers.engine.precision import (
    MixedPrecisionDtypes,
    fsdp1_mixed_precision,
    fsdp2_mixed_precision_policy,
    resolve_mixed_precision,
)

STRATEGIES = ("fsdp2", "fsdp")


def _cfg_get(config: Any, key: str, default: Any = None) -> Any:
    """``config.get(key, default)`` for DictConfig / dict / None, treating ``None`` values as missing."""
    value = None if config is None else config.get(key, default)
    return default if value is None else value


# ----------------------------------------------------------------------------- device mesh


def create_device_mesh(world_size: int, fsdp_size: int, device_name: str | None = None) -> Any:
    """verl's mesh: 1-D ``("fsdp",)`` if ``fsdp_size < 0 or >= world_size``, else 2-D ``("ddp", "fsdp")`` (HSDP)."""
    from torch.distributed.device_mesh import init_device_mesh

    device_name = device_name or get_device_name()
    if fsdp_size < 0 or fsdp_size >= world_size:
        return init_device_mesh(device_name, mesh_shape=(world_size,), mesh_dim_names=("fsdp",))
    if world_size % fsdp_size != 0:
        raise ValueError(f"fsdp_config.fsdp_size={fsdp_size} must divide the world size {world_size}.")
    return init_device_mesh(
        device_name, mesh_shape=(world_size // fsdp_size, fsdp_size), mesh_dim_names=("ddp", "fsdp")
    )


def default_device_mesh(fsdp_config: Any) -> Any:
    """Mesh over the whole default process group, shaped by ``fsdp_config.fsdp_size`` (default -1)."""
    if not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialised; call hybridrl.utils.distributed.init_distributed first."
        )
    return create_device_mesh(dist.get_world_size(), int(_cfg_get(fsdp_config, "fsdp_size", -1)))


# ----------------------------------------------------------------------------- module helpers


def enable_gradient_checkpointing(module: Any) -> None:
    """HF activation checkpointing with non-reentrant autograd (verl's setting)."""
    module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def decoder_layer_class_names(module: nn.Module, fsdp_config: Any = None) -> set[str]:
    """Class names to shard one by one: ``wrap_policy.transformer_layer_cls_to_wrap`` or HF's ``_no_split_modules``."""
    configured = _cfg_get(_cfg_get(fsdp_config, "wrap_policy"), "transformer_layer_cls_to_wrap")
    names = configured if configured is not None else getattr(module, "_no_split_modules", None)
    names = [names] if isinstance(names, str) else list(names or [])
    if not names:
        raise ValueError(
            f"{type(module).__name__} has no _no_split_modules; set "
            "fsdp_config.wrap_policy.transformer_layer_cls_to_wrap to the decoder layer class name."
        )
    return set(names)


def _word_embeddings_tied(module: nn.Module) -> bool:
    config = getattr(module, "config", None)
    return bool(getattr(config, "tie_word_embeddings", False))


def _unique_tensors(module: nn.Module) -> Iterable[torch.Tensor]:
    """Parameters then buffers, each tensor once (tied weights appear once)."""
    seen: set[int] = set()
    for tensor in [*module.parameters(), *module.buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            yield tensor


@torch.no_grad()
def broadcast_module_from_rank0(module: nn.Module, device_name: str | None = None) -> None:
    """Make every rank's (unsharded) weights equal to rank 0's. No-op without a multi-rank group.

    Needed because every rank loads the model itself and randomly initialised heads (critic
    ``score``) differ per rank. NCCL can only broadcast device tensors, so CPU tensors make a round trip.
    """
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    device = torch.device("cuda", get_device_id()) if (device_name or get_device_name()) == "cuda" else None
    for tensor in _unique_tensors(module):
        local = tensor.data
        staged = local.to(device) if device is not None else local
        dist.broadcast(staged, src=0)
        if staged.data_ptr() != local.data_ptr():  # a device round trip: copy the result back
            local.copy_(staged)


# ----------------------------------------------------------------------------- FSDP2


def fsdp2_wrap_targets(module: nn.Module, fsdp_config: Any = None) -> list[nn.Module]:
    """Submodules that get their own ``fully_shard``: decoder layers, plus embeddings when untied (verl)."""
    layer_names = decoder_layer_class_names(module, fsdp_config)
    tied = _word_embeddings_tied(module)
    return [
        m for m in module.modules() if type(m).__name__ in layer_names or (isinstance(m, nn.Embedding) and not tied)
    ]


def apply_fsdp2(
    module: nn.Module,
    *,
    mesh: Any,
    mixed_precision: MixedPrecisionDtypes,
    reshard_after_forward: bool,
    cpu_offload: bool,
    fsdp_config: Any = None,
) -> nn.Module:
    """``fully_shard`` each decoder layer (and untied embedding), then the root. Returns the root."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    offload = (
        CPUOffloadPolicy(pin_memory=mesh.device_type == "cuda")  # pinning needs an accelerator
        if cpu_offload
        else OffloadPolicy()
    )
    kwargs = {
        "mesh": mesh,
        "mp_policy": fsdp2_mixed_precision_policy(mixed_precision),
        "offload_policy": offload,
        "reshard_after_forward": reshard_after_forward,
    }
    for target in fsdp2_wrap_targets(module, fsdp_config):
        fully_shard(target, **kwargs)
    fully_shard(module, **kwargs)  # FSDP2 keeps the root unsharded after forward anyway
    return module


# ----------------------------------------------------------------------------- FSDP1


def _fsdp1_auto_wrap_policy(module: nn.Module, fsdp_config: Any) -> Any:
    """Size-based wrap when ``wrap_policy.min_num_params > 0``, else transformer-layer wrap (verl)."""
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy, transformer_auto_wrap_policy

    min_num_params = int(_cfg_get(_cfg_get(fsdp_config, "wrap_policy"), "min_num_params", 0))
    if min_num_params > 0:
        return functools.partial(size_based_auto_wrap_policy, min_num_params=min_num_params)
    names = decoder_layer_class_names(module, fsdp_config)
    classes = {type(m) for m in module.modules() if type(m).__name__ in names}
    return functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=classes)


def apply_fsdp1(
    module: nn.Module,
    *,
    mesh: Any,
    mixed_precision: MixedPrecisionDtypes,
    reshard_after_forward: bool,
    cpu_offload: bool,
    fsdp_config: Any = None,
) -> nn.Module:
    """Wrap with ``FullyShardedDataParallel`` (``use_orig_params=True``, transformer auto-wrap)."""
    from torch.distributed.fsdp import CPUOffload, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    hybrid = mesh.ndim == 2
    if reshard_after_forward:
        strategy = ShardingStrategy.HYBRID_SHARD if hybrid else ShardingStrategy.FULL_SHARD
    else:
        strategy = ShardingStrategy._HYBRID_SHARD_ZERO2 if hybrid else ShardingStrategy.SHARD_GRAD_OP
    device_id = torch.device("cpu") if mesh.device_type == "cpu" else get_device_id()
    return FSDP(
        module,
        device_mesh=mesh,
        auto_wrap_policy=_fsdp1_auto_wrap_policy(module, fsdp_config),
        mixed_precision=None if mixed_precision.is_full_precision else fsdp1_mixed_precision(mixed_precision),
        sharding_strategy=strategy,
        cpu_offload=CPUOffload(offload_params=cpu_offload),
        device_id=device_id,
        use_orig_params=True,
        sync_module_states=False,  # weights were already broadcast from rank 0
        forward_prefetch=bool(_cfg_get(fsdp_config, "forward_prefetch", False)),
    )


# ----------------------------------------------------------------------------- entry point


def apply_fsdp(
    module: nn.Module,
    fsdp_config: Any,
    *,
    strategy: str = "fsdp2",
    mixed_precision: MixedPrecisionDtypes | None = None,
    device_mesh: Any = None,
    param_offload: bool = False,
) -> nn.Module:
    """Shard ``module`` over ``device_mesh`` and return the wrapped module.

    Args:
        module: an unsharded HF model (on CPU or on the device).
        fsdp_config: ``*.fsdp_config`` (keys ``reshard_after_forward``, ``fsdp_size``, ``wrap_policy``,
            ``offload_policy``, ``forward_prefetch``, optional ``mixed_precision``).
        strategy: ``fsdp2`` (``fully_shard``) or ``fsdp`` (FSDP1).
        mixed_precision: dtypes; None → ``resolve_mixed_precision(fsdp_config)``.
        device_mesh: None → one over the whole default group (see :func:`default_device_mesh`).
        param_offload: keep sharded params on CPU under torch's own offload (FSDP2 ``CPUOffloadPolicy``,
            FSDP1 ``CPUOffload``). verl uses it for the ref model and for the actor when
            ``fsdp_config.offload_policy``; ``fsdp_config.offload_policy=True`` turns it on here too.
            (The manual between-calls offload of ``fsdp_config.param_offload`` is ``offload.py``.)
    """
    if strategy not in STRATEGIES:
        raise ValueError(
            f"strategy={strategy!r} is not supported; use one of {STRATEGIES} (actor.strategy/critic.strategy)."
        )
    mesh = device_mesh if device_mesh is not None else default_device_mesh(fsdp_config)
    dtypes = mixed_precision or resolve_mixed_precision(fsdp_config, device_name=mesh.device_type)
    broadcast_module_from_rank0(module, mesh.device_type)
    wrap = apply_fsdp2 if strategy == "fsdp2" else apply_fsdp1
    return wrap(
        module,
        mesh=mesh,
        mixed_precision=dtypes,
        reshard_after_forward=bool(_cfg_get(fsdp_config, "reshard_after_forward", True)),
        cpu_offload=bool(param_offload or _cfg_get(fsdp_config, "offload_policy", False)),
        fsdp_config=fsdp_config,
    )


def fsdp_version(module: nn.Module) -> int:
    """2 for a ``fully_shard``-ed module, 1 for FSDP1, 0 for a plain module."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if isinstance(module, FSDPModule):
        return 2
    return 1 if isinstance(module, FSDP) else 0
