"""``AgentLoopManager``: the driver-side rollout of ``rollout.mode=async`` (verl's class, same role).

One call per generation batch::

    wake_up every rollout worker        engine wakes, takes the actor's new weights (verified), server starts
    split rows over the agent-loop workers (rollout.agent.num_workers Ray actors, contiguous chunks)
    each plays its rows' conversations concurrently against the servers (sticky per conversation)
    sleep every rollout worker          server drains and stops, engine frees its memory (free_cache_engine)
    concat (row order kept) + metrics

It answers ``generate_sequences(DataProto)`` like the actor-rollout worker group, so the trainer's stages use either.
Every rank of the actor-rollout group is one replica (tensor parallel size 1; see ``check_async_rollout``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import ray

from hybridrl.config.checks_rollout import check_rollout_mode
from hybridrl.config.errors import ConfigError
from hybridrl.experimental.agent_loop.worker import ROW_OFFSET_KEY, AgentLoopWorker
from hybridrl.protocol import DataProto

__all__ = ["AgentLoopManager", "check_async_rollout"]


def check_async_rollout(config: Any) -> None:
    """Fail early on settings server mode cannot run (the config validation's rollout checks, for a manager built
    from user code with a config that was never validated)."""
    problems = check_rollout_mode(config)
    if problems:
        raise ConfigError(problems)


def _stats(prefix: str, values: list[float]) -> dict[str, float]:
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return {}
    return {f"{prefix}/min": float(array.min()), f"{prefix}/max": float(array.max()), f"{prefix}/mean": float(array.mean())}


def _concat_lists(parts: Any) -> dict[str, list[float]]:
    merged: dict[str, list[float]] = {}
    for part in parts:
        for key, values in part.items():
            merged.setdefault(key, []).extend(values)
    return merged


class AgentLoopManager:
    """Driver-side server-mode rollout over ``worker_group``'s rollout workers.

    Args:
        config: the whole run config.
        worker_group: the actor-rollout worker group, or under separate_async the rollout's own group
            (``AsyncActorRolloutRefWorker``: wake_up / sleep / generate).
        reward_loop_worker_handles: reward workers of the reward loop; given, each sample is scored as soon as
            its agent loop ends (rule rewards), not after the whole batch.
    """

    reads_row_columns = True  # agent loops get every non-tensor column of their row (stages.with_row_columns)

    def __init__(self, config: Any, worker_group: Any, reward_loop_worker_handles: list[Any] | None = None) -> None:
        check_async_rollout(config)
        self.config = config
        self.worker_group = worker_group
        self.server_handles = list(worker_group.workers)
        self.world_size = worker_group.world_size
        num_workers = int(config.actor_rollout_ref.rollout.agent.num_workers)
        remote_cls = ray.remote(AgentLoopWorker)
        self.agent_loop_workers = [
            remote_cls.options(num_cpus=0, max_concurrency=1000).remote(
                config, self.server_handles, reward_loop_worker_handles
            )
            for _ in range(num_workers)
        ]

    def wake_up(self) -> dict[str, float]:
        """Every rollout worker wakes and syncs weights (collectively); returns rank 0's sync metrics."""
        results = ray.get([handle.wake_up.remote() for handle in self.server_handles])
        return dict(results[0] or {})

    def sleep(self) -> None:
        ray.get([handle.sleep.remote() for handle in self.server_handles])

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """The rollout batch of ``prompts`` (one trajectory per row; see ``postprocess``), with ``meta_info``
        ``timing`` (verl's ``agent_loop/*`` entries, ``generate_sequences``, ``weight_sync``) and ``metrics``."""
        start = time.perf_counter()
        sync_metrics = self.wake_up()
        try:
            outputs = ray.get(self._dispatch(prompts))
        finally:
            self.sleep()
        timing = {"generate_sequences": time.perf_counter() - start}
        if sync_metrics:
            timing["weight_sync"] = sync_metrics.get("rollout/weight_sync_s", 0.0)
        metrics = _concat_lists(part.meta_info.pop("metrics", {}) for part in outputs)
        for key, values in _concat_lists(part.meta_info.pop("agent_timing", {}) for part in outputs).items():
            timing.update(_stats(f"agent_loop/{key}", values))
        output = DataProto.concat(outputs)
        output.meta_info = {"timing": timing, "metrics": {**metrics, **sync_metrics}}
        return output

    def _dispatch(self, prompts: DataProto) -> list[Any]:
        """Contiguous chunks of rows, one per agent-loop worker (fewer when there are fewer rows)."""
        bounds = np.linspace(0, len(prompts), num=min(len(self.agent_loop_workers), len(prompts)) + 1).astype(int)
        refs = []
        for worker, (lo, hi) in zip(self.agent_loop_workers, zip(bounds[:-1], bounds[1:])):
            chunk = prompts.slice(int(lo), int(hi))
            chunk.meta_info = {**prompts.meta_info, ROW_OFFSET_KEY: int(lo)}
            refs.append(worker.generate_sequences.remote(chunk))
        return refs
