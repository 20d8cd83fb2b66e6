"""FSDP training engine: model build (``ModelSpec`` -> ``build_fsdp_module``), FSDP2/FSDP1 wrap, precision,
optimizer, offload (``on_device``), state dicts, checkpoints."""

from hybridrl.utils.import_utils import import_external_libs
from hybridrl.workers.engine.checkpoint import FSDPCheckpointManager
from hybridrl.workers.engine.fsdp import (
    apply_fsdp,
    broadcast_module_from_rank0,
    create_device_mesh,
    enable_gradient_checkpointing,
    fsdp_version,
)
from hybridrl.workers.engine.lora import apply_lora, disable_adapter, lora_enabled
from hybridrl.workers.engine.model_builder import ModelSpec, build_fsdp_module
from hybridrl.workers.engine.model_loader import build_tokenizer, load_hf_config, load_hf_model
from hybridrl.workers.engine.offload import load_model, load_optimizer, offload_model, offload_optimizer, on_device
from hybridrl.workers.engine.optim import (
    build_lr_scheduler,
    build_optimizer,
    clip_grad_and_step,
    clip_grad_norm,
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
)
from hybridrl.workers.engine.precision import (
    MixedPrecisionDtypes,
    resolve_mixed_precision,
    resolve_model_dtype,
    to_dtype,
)
from hybridrl.workers.engine.state_dict import get_full_state_dict, iter_full_state_dict, load_full_state_dict

__all__ = [
    "FSDPCheckpointManager",
    "MixedPrecisionDtypes",
    "ModelSpec",
    "apply_fsdp",
    "apply_lora",
    "broadcast_module_from_rank0",
    "build_fsdp_module",
    "build_lr_scheduler",
    "build_optimizer",
    "build_tokenizer",
    "clip_grad_and_step",
    "clip_grad_norm",
    "create_device_mesh",
    "disable_adapter",
    "enable_gradient_checkpointing",
    "fsdp_version",
    "get_constant_schedule_with_warmup",
    "get_cosine_schedule_with_warmup",
    "get_full_state_dict",
    "import_external_libs",
    "iter_full_state_dict",
    "load_full_state_dict",
    "load_hf_config",
    "load_hf_model",
    "load_model",
    "load_optimizer",
    "lora_enabled",
    "offload_model",
    "offload_optimizer",
    "on_device",
    "resolve_mixed_precision",
    "resolve_model_dtype",
    "to_dtype",
]
