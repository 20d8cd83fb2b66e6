"""Run a function on N spawned gloo ranks (each a fresh process: megatron-core's parallel state is global)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hybridrl.utils.ports import free_port

# megatron_config sections for the tests (the keys of actor_rollout_ref.actor.megatron that the engine reads)
def megatron_section(tp_size: int, use_mbridge: bool = False) -> dict[str, Any]:
    return dict(
        tensor_model_parallel_size=tp_size, pipeline_model_parallel_size=1, virtual_pipeline_model_parallel_size=None,
        context_parallel_size=1, expert_model_parallel_size=1, expert_tensor_parallel_size=None, seed=42,
        sequence_parallel=True, use_distributed_optimizer=True, override_transformer_config={},
        use_mbridge=use_mbridge, param_offload=False, grad_offload=False, optimizer_offload=False,
    )


def _child(rank: int, world_size: int, port: int, fn: Callable[..., dict], args: tuple, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), HYBRIDRL_DEVICE="cpu")
    dist.init_process_group("gloo")
    try:
        result = fn(rank, *args)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def run_ranks(fn: Callable[..., dict], world_size: int, out_dir: Path, *args: Any) -> list[dict]:
    """``fn(rank, *args)`` on ``world_size`` spawned gloo processes; returns each rank's dict of tensors/floats."""
    out_dir.mkdir(parents=True, exist_ok=True)
    mp.spawn(_child, args=(world_size, free_port(), fn, args, str(out_dir)), nprocs=world_size, join=True)
    return [torch.load(out_dir / f"rank{rank}.pt", weights_only=True) for rank in range(world_size)]
