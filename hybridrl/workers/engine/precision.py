"""Model and mixed-precision dtypes from ``fsdp_config`` (verl's rules).

verl reads two optional keys of ``*.fsdp_config`` with code defaults (they are not in verl 0.5's YAML):

- ``model_dtype``: dtype the HF model is loaded in (the FSDP "master" weights).
  verl default: fp32 for a trainable model (actor, critic), bf16 for a frozen one (ref, reward model).
- ``mixed_precision.{param_dtype, reduce_dtype, buffer_dtype}``: compute / gradient-reduce / buffer
  dtypes. verl default: bf16 / fp32 / fp32.

hybridrl deviation: on CPU (``device_name == "cpu"``) the code defaults are fp32 everywhere,
because bf16 autocast on CPU is slower than fp32 on machines without AMX and changes numerics
of the CPU tests; set the keys explicitly to use bf16 on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

_DTYPE_NAMES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
}

# verl's code defaults on GPU (fsdp_workers._build_model_optimizer).
_GPU_MIXED_PRECISION = {"param_dtype": "bf16", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
_CPU_MIXED_PRECISION = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def to_dtype(value: str | torch.dtype) -> torch.dtype:
    """``"bf16"``/``"bfloat16"``/``"fp16"``/``"fp32"``/``"float32"``/``torch.dtype`` → ``torch.dtype``."""
    if isinstance(value, torch.dtype):
        return value
    name = str(value).lower().removeprefix("torch.")
    if name not in _DTYPE_NAMES:
        raise ValueError(f"Unknown dtype {value!r}; use one of {sorted(_DTYPE_NAMES)}.")
    return _DTYPE_NAMES[name]


def _get(config: Any, key: str, default: Any = None) -> Any:
    """``config.get(key, default)`` for DictConfig, dict or ``None``."""
    if config is None:
        return default
    value = config.get(key, default)
    return default if value is None else value


@dataclass(frozen=True)
class MixedPrecisionDtypes:
    """Compute dtype of params, dtype of gradient reduction, dtype of buffers."""

    param_dtype: torch.dtype
    reduce_dtype: torch.dtype
    buffer_dtype: torch.dtype

    @property
    def is_full_precision(self) -> bool:
        """True when every dtype is fp32 (no casting needed)."""
        return {self.param_dtype, self.reduce_dtype, self.buffer_dtype} == {torch.float32}


def resolve_model_dtype(fsdp_config: Any, *, trainable: bool, device_name: str) -> torch.dtype:
    """dtype to load the model in: ``fsdp_config.model_dtype`` or verl's default.

    verl: fp32 master weights when ``trainable`` (actor/critic), bf16 for frozen models (ref/RM);
    on CPU always fp32 unless ``model_dtype`` is set.
    """
    configured = _get(fsdp_config, "model_dtype")
    if configured is not None:
        return to_dtype(configured)
    if device_name == "cpu" or trainable:
        return torch.float32
    return torch.bfloat16


def resolve_mixed_precision(fsdp_config: Any, *, device_name: str) -> MixedPrecisionDtypes:
    """``fsdp_config.mixed_precision`` with verl's per-key defaults (fp32 everywhere on CPU)."""
    defaults = _CPU_MIXED_PRECISION if device_name == "cpu" else _GPU_MIXED_PRECISION
    section = _get(fsdp_config, "mixed_precision")
    values = {key: to_dtype(_get(section, key, default)) for key, default in defaults.items()}
    return MixedPrecisionDtypes(**values)


def fsdp2_mixed_precision_policy(dtypes: MixedPrecisionDtypes) -> Any:
    """FSDP2 ``MixedPrecisionPolicy`` (verl passes ``cast_forward_inputs=True``; buffers stay as loaded)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(
        param_dtype=dtypes.param_dtype, reduce_dtype=dtypes.reduce_dtype, cast_forward_inputs=True
    )


def fsdp1_mixed_precision(dtypes: MixedPrecisionDtypes) -> Any:
    """FSDP1 ``MixedPrecision(param_dtype, reduce_dtype, buffer_dtype)``."""
    from torch.distributed.fsdp import MixedPrecision

    return MixedPrecision(
        param_dtype=dtypes.param_dtype, reduce_dtype=dtypes.reduce_dtype, buffer_dtype=dtypes.buffer_dtype
    )
