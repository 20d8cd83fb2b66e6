"""Which device the workers compute on: ``cuda`` (NCCL) or ``cpu`` (gloo).

The trainer's ``trainer.device`` reaches the worker processes through the environment variable
``HYBRIDRL_DEVICE`` (``cpu`` | ``cuda``); without it, ``cuda`` is used when a GPU is visible.
Every other module asks here instead of calling ``torch.cuda`` directly, so the same code runs on
a CPU box and on a GPU cluster; that includes the workers' memory metrics (``memory_metrics``).
"""

from __future__ import annotations

import os
from types import ModuleType

import torch

DEVICE_ENV_VAR = "HYBRIDRL_DEVICE"
_SUPPORTED_DEVICES = ("cpu", "cuda")


def _cuda_available() -> bool:
    """True when torch sees at least one CUDA device (asked on every call, so tests may patch torch)."""
    return torch.cuda.is_available()


# verl 0.5 exposes a module-level bool (``if is_cuda_available:``), not a function.
is_cuda_available: bool = _cuda_available()


def get_device_name() -> str:
    """``cpu`` or ``cuda``: ``$HYBRIDRL_DEVICE`` if set, else ``cuda`` when available, else ``cpu``."""
    name = os.environ.get(DEVICE_ENV_VAR, "").strip().lower()
    if not name:
        return "cuda" if _cuda_available() else "cpu"
    if name not in _SUPPORTED_DEVICES:
        raise ValueError(f"{DEVICE_ENV_VAR}={name!r} is not supported; use one of {_SUPPORTED_DEVICES}.")
    if name == "cuda" and not _cuda_available():
        raise RuntimeError(f"{DEVICE_ENV_VAR}=cuda but no CUDA device is visible; set trainer.device=cpu.")
    return name


def get_torch_device() -> ModuleType:
    """The torch device module (``torch.cuda`` or ``torch.cpu``) for ``get_device_name()``."""
    return getattr(torch, get_device_name())


def get_device_id() -> int:
    """Local device index on CUDA (``torch.cuda.current_device()``), 0 on CPU."""
    return torch.cuda.current_device() if get_device_name() == "cuda" else 0


def current_device() -> torch.device:
    """``torch.device`` this process computes on (``cuda:<local index>`` or ``cpu``)."""
    name = get_device_name()
    return torch.device(name, get_device_id()) if name == "cuda" else torch.device("cpu")


def get_dist_backend(device_name: str | None = None) -> str:
    """torch.distributed backend for a device: ``nccl`` on CUDA, ``gloo`` on CPU."""
    return "nccl" if (device_name or get_device_name()) == "cuda" else "gloo"


def empty_cache() -> None:
    """Release cached accelerator memory (no-op on CPU)."""
    if get_device_name() == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------
# verl 0.5 names (hybridrl runs on CUDA or CPU; Ascend NPUs are not supported)
# ---------------------------------------------------------------------------


def is_torch_npu_available() -> bool:
    """Always False: hybridrl has no Ascend NPU backend (verl checks ``torch.npu``)."""
    return False


is_npu_available = is_torch_npu_available()


def get_visible_devices_keyword() -> str:
    """The environment variable that lists the visible accelerators (``CUDA_VISIBLE_DEVICES``)."""
    return "CUDA_VISIBLE_DEVICES"


def get_nccl_backend() -> str:
    """verl's name for :func:`get_dist_backend` of this process's device (``nccl`` or ``gloo``)."""
    return get_dist_backend()


_GIB = 1024**3


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
