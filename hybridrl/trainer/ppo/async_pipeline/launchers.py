"""How a generation is enqueued without waiting for it, and how the rollout's weights are pushed.

    RayGenerationLauncher     a worker group: ``generate_sequences_nonblocking`` returns a DataProtoFuture at
                              once; Ray runs the worker's calls in the order the driver enqueued them
    ThreadGenerationLauncher  a rollout whose generate blocks (the agent-loop manager, rollout.mode=async): one
                              driver thread runs the calls in order; the driver joins it before it calls the
                              workers itself, so calls never interleave
    WeightPusher              separate_async: actor.publish_weights(version) → rollout.receive_weights(package),
                              the push enqueued behind the generations already queued (those finish with the old
                              weights: a push never interrupts a generation)
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hybridrl.protocol import DataProto

__all__ = ["RayGenerationLauncher", "ThreadGenerationLauncher", "WeightPusher", "make_launcher",
           "pop_rollout_span"]

# generate_sequences_nonblocking reports the worker-side wall span of each generation under these metric keys
SPAN_START_KEY, SPAN_END_KEY = "async/rollout_start_unix", "async/rollout_end_unix"


class RayGenerationLauncher:
    """Enqueue ``generate_sequences_nonblocking`` on a worker group (Dispatch.DP_COMPUTE_PROTO, blocking=False)."""

    joins_before_worker_calls = False

    def __init__(self, rollout_group: Any) -> None:
        self.rollout_group = rollout_group

    def launch(self, gen_batch: DataProto) -> Callable[[], DataProto]:
        return self.rollout_group.generate_sequences_nonblocking(gen_batch).get

    def close(self) -> None:
        return None


class ThreadGenerationLauncher:
    """Run a blocking ``generate_sequences`` (the agent-loop manager) on one driver thread, in launch order."""

    joins_before_worker_calls = True

    def __init__(self, rollout: Any) -> None:
        self.rollout = rollout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="async_generate")

    def launch(self, gen_batch: DataProto) -> Callable[[], DataProto]:
        return self._executor.submit(self.rollout.generate_sequences, gen_batch).result

    def close(self) -> None:
        self._executor.shutdown(wait=True)


def make_launcher(rollout: Any) -> RayGenerationLauncher | ThreadGenerationLauncher:
    """The launcher for ``rollout``: a worker group that has the non-blocking generate, else a thread."""
    if hasattr(rollout, "generate_sequences_nonblocking"):
        return RayGenerationLauncher(rollout)
    return ThreadGenerationLauncher(rollout)


def pop_rollout_span(output: DataProto) -> tuple[float, float] | None:
    """``(first start, last end)`` over the ranks of a generation (worker-side unix seconds), removed from the
    output's metrics; None when the rollout did not report it."""
    metrics = output.meta_info.get("metrics")
    if not isinstance(metrics, dict) or SPAN_START_KEY not in metrics:
        return None
    starts, ends = metrics.pop(SPAN_START_KEY), metrics.pop(SPAN_END_KEY)
    starts = starts if isinstance(starts, list) else [starts]
    ends = ends if isinstance(ends, list) else [ends]
    return min(starts), max(ends)


class WeightPusher:
    """separate_async's weight push (the wsync interface of issue 19): the actor's ranks publish a
    ``WeightPackage`` (buckets in Ray's object store), the rollout loads it, non-blocking."""

    def __init__(self, actor_group: Any, rollout_group: Any) -> None:
        self.actor_group = actor_group
        self.rollout_group = rollout_group
        self._pending: list[Any] = []  # refs of receive_weights calls not reported yet

    def push(self, version: int) -> None:
        from hybridrl.workers.sharding_manager.weight_transfer import first_package

        package = first_package(self.actor_group.publish_weights(version))
        refs = self.rollout_group.receive_weights(package)
        self._pending.append(refs if isinstance(refs, list) else [refs])

    def finished_metrics(self, wait: bool = False) -> dict[str, float]:
        """Rank 0's metrics of the pushes the rollout has applied (all of them when ``wait``), summed over pushes,
        plus ``rollout/weight_pushes``."""
        import ray

        done, metrics = [], {}
        for refs in self._pending:
            if not wait and len(ray.wait(refs, num_returns=len(refs), timeout=0)[0]) < len(refs):
                break  # later pushes run after this one
            results = ray.get(refs)
            for key, value in (results[0] or {}).items():
                metrics[key] = metrics.get(key, 0.0) + float(value)
            done.append(refs)
        self._pending = self._pending[len(done):]
        return {**metrics, "rollout/weight_pushes": float(len(done))} if done else {}
