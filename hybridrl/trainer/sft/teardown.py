"""Leave torch.distributed cleanly and exit with a reliable status.

The abort this module exists for (cpu-facts §3): after all work is done and ``destroy_process_group``
returned, a gloo process sometimes dies at interpreter exit with ``terminate called without an active
exception`` (SIGABRT, exit -6), and torchrun reports a ChildFailedError although every file was written.

Cause: ``destroy_process_group`` only drops the c10d registry's references. The ProcessGroupGloo and
its store stay alive while Python objects still point at them: the DeviceMesh held by every FSDP2
module and DTensor, FSDP1 state, pending ``Work`` objects. They are then destroyed during interpreter
finalisation, in an arbitrary order with module teardown and static C++ destructors; a gloo worker /
store thread still joinable (or a tensor whose release needs the GIL, pytorch#179291) at that point
calls ``std::terminate``.

Fix, in order:
1. :func:`release` drops the trainer's model, optimizer and loaders and runs ``gc.collect()``, so the
   process group's last references go while the interpreter is fully alive;
2. :func:`clean_exit_process_group`: barrier (no rank is still inside a collective) →
   ``destroy_process_group``;
3. :func:`exit_now` (last resort): flush stdio and ``os._exit(code)``, skipping interpreter
   finalisation where any leftover C++ destructor would run. Everything the run produces (checkpoints,
   tracker, HF export, logger files) is already closed by then, so nothing is lost.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

import torch.distributed as dist


def release(*objects: Any) -> None:
    """Drop the attributes of ``objects`` (model, optimizer, meshes…) and collect garbage now."""
    for obj in objects:
        if obj is not None and hasattr(obj, "__dict__"):
            obj.__dict__.clear()
    gc.collect()


def clean_exit_process_group(barrier: bool = True) -> None:
    """Barrier (when ``barrier``), then destroy the default process group and its subgroups (no-op without one)."""
    if not dist.is_initialized():
        return
    try:
        if barrier and dist.get_world_size() > 1:
            dist.barrier()
    finally:
        dist.destroy_process_group()
        gc.collect()


def exit_now(code: int) -> None:
    """Flush stdio and leave with ``code`` without interpreter finalisation (see the module docstring)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
