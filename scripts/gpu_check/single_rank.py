"""The FSDP worker classes in one process without Ray: torch.distributed from environment variables.

What a Ray worker group would set for each worker (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``) is set here for a 1-rank group; ``HYBRIDRL_DEVICE`` picks ``cuda`` (NCCL for CUDA tensors,
gloo for CPU ones) or ``cpu`` (gloo). The worker then joins the group itself in its constructor.
"""

from __future__ import annotations

import os
from typing import Any

from gpu_check.workload import BatchShape


def join_single_rank_group(device: str) -> None:
    """Set the rendezvous variables of a 1-rank group on a free local port and the device the workers use."""
    from hybridrl.utils.ports import free_port

    os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    os.environ["HYBRIDRL_DEVICE"] = device


def actor_rollout_ref_config(model_path: str, shape: BatchShape, *extra: str) -> Any:
    """``configs/ppo_trainer.yaml``'s ``actor_rollout_ref`` section for one rank, bf16 compute, the hf rollout.

    ``+...mixed_precision.param_dtype=bf16`` is verl's GPU default already; it is written out so the CPU dry run
    takes the same bf16 path.
    """
    from hybridrl.config import compose_config

    overrides = [
        f"actor_rollout_ref.model.path={model_path}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        f"data.train_batch_size={shape.batch_size}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={shape.batch_size}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={shape.micro_batch}",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
        "actor_rollout_ref.rollout.name=hf",
        # padded forwards and sampling seed 0: verl 0.5's defaults, which the recorded checks ran with (0.9: packed, 42)
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.rollout.seed=0",
        f"actor_rollout_ref.rollout.prompt_length={shape.prompt_length}",
        f"actor_rollout_ref.rollout.response_length={shape.response_length}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={shape.micro_batch}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={shape.micro_batch}",
        "trainer.n_gpus_per_node=1",
        *extra,
    ]
    return compose_config("ppo_trainer", overrides).actor_rollout_ref


def build_actor_worker(model_path: str, shape: BatchShape, role: str = "actor", *extra: str) -> Any:
    """An initialised ``ActorRolloutRefWorker`` (FSDP2) for ``role``, in this process's 1-rank group."""
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(actor_rollout_ref_config(model_path, shape, *extra), role=role)
    worker.init_model()
    return worker


def actor_update(worker: Any, data: Any) -> dict[str, Any]:
    """One PPO update on ``data`` with the actor's own log-probs as ``old_log_probs``; returns the metrics.

    The worker moves ``data`` to its device in place and returns CPU tensors: ``data`` comes back to the CPU before
    the log-probs join it, as the driver's batches do.
    """
    old_log_probs = worker.compute_log_prob(data).batch["old_log_probs"]
    data.to("cpu")
    data.batch["old_log_probs"] = old_log_probs
    return worker.update_actor(data).meta_info["metrics"]


def first(value: Any) -> float:
    """A metric as one float (the actor returns lists per micro batch for some keys)."""
    if isinstance(value, (list, tuple)):
        return float(sum(value) / len(value)) if value else float("nan")
    return float(value)
