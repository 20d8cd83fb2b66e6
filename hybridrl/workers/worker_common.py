"""Pieces the three FSDP workers share: process group, model build, offload around calls, perf metrics.

Each function is a short composition of the engine (``hybridrl.workers.engine``), so the worker
classes stay thin RPC surfaces: they turn a ``DataProto`` into an engine call and back.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from hybridrl.utils.device import current_device, get_device_name, get_torch_device
from hybridrl.workers import engine

__all__ = [
    "ModelSpec",
    "build_fsdp_module",
    "init_worker_distributed",
    "memory_metrics",
    "on_device",
]

_GIB = 1024**3


def init_worker_distributed(device_name: str) -> int:
    """Join the worker group's process group (env ``WORLD_SIZE/RANK/MASTER_ADDR/MASTER_PORT``); return the world size.

    verl initialises torch.distributed in the worker constructor; a single process without the
    rendezvous variables (a notebook, a unit test) gets a 1-rank group on a free local port.
    """
    import torch.distributed as dist

    from hybridrl.utils.distributed import init_distributed

    if not dist.is_initialized():
        if "MASTER_PORT" not in os.environ and os.environ.get("WORLD_SIZE", "1") == "1":
            from hybridrl.single_controller.base.worker import free_port

            os.environ.update(WORLD_SIZE="1", RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        init_distributed(device_name)
    return dist.get_world_size()


class ModelSpec:
    """Where a worker's model comes from and how it is wrapped (read from a verl config section).

    Args:
        model_config: ``*.model`` (``path``, ``override_config``, ``trust_remote_code``, ``external_lib``,
            ``enable_gradient_checkpointing``).
        fsdp_config: the matching ``fsdp_config`` section.
        strategy: ``fsdp2`` (default) or ``fsdp``.
        kind: ``causal_lm`` or ``token_classification``.
        trainable: actor/critic (fp32 master weights, gradient checkpointing) vs ref/RM.
        sp_group: the Ulysses sequence-parallel group (None: no sequence parallelism).
    """

    def __init__(
        self, model_config: Any, fsdp_config: Any, strategy: str, kind: str, trainable: bool, sp_group: Any = None
    ) -> None:
        self.model_config = model_config
        self.fsdp_config = fsdp_config
        self.strategy = strategy or "fsdp2"
        self.kind = kind
        self.trainable = trainable
        self.sp_group = sp_group  # Ulysses SP group: attention runs as ulysses_sdpa (hybridrl.utils.ulysses)


def build_fsdp_module(spec: ModelSpec, device_name: str) -> tuple[nn.Module, Any]:
    """Load the HF model, optionally enable gradient checkpointing, shard it. Returns ``(module, hf_config)``."""
    model_config = spec.model_config
    engine.import_external_libs(model_config.get("external_lib"))
    dtype = engine.resolve_model_dtype(spec.fsdp_config, trainable=spec.trainable, device_name=device_name)
    attn_implementation = None
    if spec.sp_group is not None:
        from hybridrl.utils import ulysses

        attn_implementation = ulysses.register_ulysses_attention()
    module, hf_config = engine.load_hf_model(
        model_config.path,
        kind=spec.kind,
        torch_dtype=dtype,
        override_config=dict(model_config.get("override_config") or {}),
        trust_remote_code=bool(model_config.trust_remote_code),
        attn_implementation=attn_implementation,
    )
    if spec.trainable and model_config.enable_gradient_checkpointing:
        engine.enable_gradient_checkpointing(module)
    if spec.trainable and engine.lora_enabled(model_config):
        module = _apply_lora(module, spec)
    if device_name == "cuda":
        module.to(current_device())
    # verl: frozen FSDP1 models (ref, RM) keep their params offloaded to CPU between uses on GPU
    param_offload = (not spec.trainable) and spec.strategy == "fsdp" and device_name == "cuda"
    wrapped = engine.apply_fsdp(module, spec.fsdp_config, strategy=spec.strategy, param_offload=param_offload)
    if spec.sp_group is not None:
        from hybridrl.utils import ulysses

        ulysses.mark_sequence_parallel(wrapped, spec.sp_group)
    return wrapped, hf_config


_LORA_STRATEGY_KEYS = {"causal_lm": ("actor", "actor_rollout_ref.actor"), "token_classification": ("critic", "critic")}


def _apply_lora(module: nn.Module, spec: ModelSpec) -> nn.Module:
    """Adapters before FSDP (verl), base weights frozen: the actor's causal LM, or the critic's value model
    (whose fresh value head is trained in full). FSDP2 only."""
    from hybridrl.workers.engine.lora import apply_value_lora

    role, prefix = _LORA_STRATEGY_KEYS[spec.kind]
    if spec.strategy != "fsdp2":
        raise ValueError(
            f"model.lora_rank > 0 needs {role}.strategy=fsdp2 (got {spec.strategy!r}): FSDP1 cannot mix frozen "
            f"base weights and trainable adapters in one FlatParameter here; set {prefix}.strategy=fsdp2."
        )
    if spec.kind == "causal_lm":
        return engine.apply_lora(module, spec.model_config)
    return apply_value_lora(module, spec.model_config)


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
        engine.load_model(module)
    if optimizer_offload and optimizer is not None:
        engine.load_optimizer(optimizer)
    try:
        yield
    finally:
        if param_offload and module is not None:
            engine.offload_model(module)
        if optimizer_offload and optimizer is not None:
            engine.offload_optimizer(optimizer)


def memory_metrics() -> dict[str, float]:
    """verl's ``perf/max_memory_allocated_gb``, ``perf/max_memory_reserved_gb`` (0 on CPU) and ``perf/cpu_memory_used_gb``."""
    import psutil

    allocated = reserved = 0.0
    if get_device_name() == "cuda":
        device = get_torch_device()
        allocated = device.max_memory_allocated() / _GIB
        reserved = device.max_memory_reserved() / _GIB
    return {
        "perf/max_memory_allocated_gb": allocated,
        "perf/max_memory_reserved_gb": reserved,
        "perf/cpu_memory_used_gb": psutil.virtual_memory().used / _GIB,
    }
