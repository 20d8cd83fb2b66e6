"""Check ``environment``: torch, CUDA, the device and its bf16 support, and hybridrl's packages importable.

PASS when every required package imports and (GPU run) CUDA is available with bf16; a dry run does not ask for CUDA.
Figures: versions, device name, compute capability, memory, the import status of each required package, the carried
wheels installed (from the orchestrator, which installs them before any check starts).
"""

from __future__ import annotations

import importlib
import platform
from typing import Any

from gpu_check.environment import REQUIRED_MODULES
from gpu_check.outcome import Outcome

HYBRIDRL_ENTRY_MODULES = ("hybridrl.trainer.fsdp_sft_trainer", "hybridrl.workers.fsdp_workers")


def _import_status(names) -> dict[str, str]:
    """``{name: version or 'ok'}`` for importable modules, ``{name: 'MISSING: <error>'}`` otherwise."""
    status = {}
    for name in names:
        try:
            module = importlib.import_module(name)
            status[name] = str(getattr(module, "__version__", "ok"))
        except Exception as error:  # any import failure is a finding, not a crash
            status[name] = f"MISSING: {type(error).__name__}: {error}"
    return status


def _version_text(version: Any) -> str:
    """``(2, 27, 3)`` -> ``2.27.3``; an int (older torch) as is."""
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _cuda_facts() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
                             "torch_cuda": torch.version.cuda, "nccl_available": torch.distributed.is_nccl_available()}  # fmt: skip
    if facts["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        facts.update(
            device_name=props.name,
            device_count=torch.cuda.device_count(),
            compute_capability=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
            memory_gib=round(props.total_memory / 2**30, 1),
            bf16_supported=torch.cuda.is_bf16_supported(),
            nccl_version=_version_text(torch.cuda.nccl.version()),
        )
    return facts


def run(context: dict[str, Any]) -> Outcome:
    packages = _import_status(REQUIRED_MODULES)
    entries = _import_status(HYBRIDRL_ENTRY_MODULES)
    figures: dict[str, Any] = {"python": platform.python_version(), "packages": packages, "hybridrl_entries": entries,
                               "wheels": context.get("wheels"), **_cuda_facts()}  # fmt: skip
    missing = sorted(name for name, state in {**packages, **entries}.items() if state.startswith("MISSING"))
    if missing:
        return Outcome("FAIL", f"cannot import {missing} (carry them: --wheels DIR, build_wheels.sh)", figures)
    versions = f"torch {figures['torch']}, transformers {packages['transformers']}"
    if context["mode"] == "dry-run":
        return Outcome("PASS", f"dry run on CPU: {versions}; all {len(packages)} packages import", figures)
    if not figures["cuda_available"]:
        return Outcome("FAIL", f"CUDA is not available ({versions})", figures)
    if not figures["bf16_supported"]:
        return Outcome("FAIL", f"{figures['device_name']} has no bf16 support", figures)
    return Outcome(
        "PASS",
        f"{figures['device_name']} (sm {figures['compute_capability']}, {figures['memory_gib']} GiB), bf16, "
        f"CUDA {figures['torch_cuda']}, NCCL {figures['nccl_version']}; {versions}",
        figures,
    )
