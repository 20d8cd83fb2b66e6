"""How a generation is enqueued without waiting for it, and how the rollout's weights are pushed.

    RayGenerationLauncher     a worker group: ``generate_sequences_nonblocking`` returns a DataProtoFuture at
                              once; Ray runs the worker's calls in the order the driver enqueued them
    ThreadGenerationLauncher  a rollout whose generate blocks (the agent-loop manager, rollout.mode=async): one
                              driver thread runs the calls in order; the driver joins it before it calls the
                              workers itself, so calls never interleave
    SerialRolloutLauncher     separate_async with the agent loop: the rollout's pool serves requests (asyncio
                              actors, whose calls Ray does not order), so the order lives on the driver: one thread
                              runs "generate batch i" and "load weights v" jobs in the order the schedule enqueued
                              them; it calls only the rollout's pool, so the driver never joins it
    WeightPusher              separate_async: actor.publish_weights(version) → rollout.receive_weights(package),
                              the push enqueued behind the generations already queued (those finish with the old
                              weights: a push never interrupts a generation)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, cast

from hybridrl.protocol import DataProto

if TYPE_CHECKING:  # types only: this package imports nothing of the trainer
    from hybridrl.trainer.ppo.protocols import (
        NonBlockingRolloutGroup,
        RolloutGroup,
        WeightPublisherGroup,
        WeightReceiverGroup,
    )

__all__ = ["GenerationLauncher", "RayGenerationLauncher", "SerialRolloutLauncher", "ThreadGenerationLauncher",
           "WeightPusher", "make_launcher", "pop_rollout_span"]

# generate_sequences_nonblocking reports the worker-side wall span of each generation under these metric keys
SPAN_START_KEY, SPAN_END_KEY = "async/rollout_start_unix", "async/rollout_end_unix"


class GenerationLauncher(Protocol):
    """Enqueues a generation and returns the getter of its result."""

    joins_before_worker_calls: bool  # True: wait for the generation in flight before the driver calls a group

    def launch(self, gen_batch: DataProto) -> Callable[[], DataProto]: ...

    def close(self) -> None: ...


class RayGenerationLauncher:
    """Enqueue ``generate_sequences_nonblocking`` on a worker group (Dispatch.DP_COMPUTE_PROTO, blocking=False)."""

    joins_before_worker_calls = False

    def __init__(self, rollout_group: NonBlockingRolloutGroup) -> None:
        self.rollout_group = rollout_group

    def launch(self, gen_batch: DataProto) -> Callable[[], DataProto]:
        return self.rollout_group.generate_sequences_nonblocking(gen_batch).get

    def close(self) -> None:
        return None


class ThreadGenerationLauncher:
    """Run a blocking ``generate_sequences`` (the agent-loop manager) on one driver thread, in launch order."""

    joins_before_worker_calls = True

    def __init__(self, rollout: RolloutGroup) -> None:
        self.rollout = rollout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="async_generate")

    def launch(self, gen_batch: DataProto) -> Callable[[], DataProto]:
        return self._executor.submit(self.rollout.generate_sequences, gen_batch).result

    def close(self) -> None:
        self._executor.shutdown(wait=True)


class SerialRolloutLauncher(ThreadGenerationLauncher):
    """separate_async with a blocking rollout on its own pool: generations and weight loads on one driver thread,
    in the order enqueued (a load never overlaps a generation; each batch's version is fixed by that order)."""

    joins_before_worker_calls = False  # the thread calls only the rollout's pool, never the driver's groups

    def launch(self, gen_batch: DataProto) -> Callable[[], DataProto]:
        return self.submit(_generate_with_span, self.rollout, gen_batch).result

    def submit(self, job: Callable[..., Any], *args: Any) -> Future:
        """Run ``job(*args)`` after every job enqueued before it."""
        return self._executor.submit(job, *args)


def _generate_with_span(rollout: RolloutGroup, gen_batch: DataProto) -> DataProto:
    """``rollout.generate_sequences`` with its wall span under the span keys (driver-side unix seconds)."""
    start = time.time()
    output = rollout.generate_sequences(gen_batch)
    metrics = output.meta_info.setdefault("metrics", {})
    metrics.update({SPAN_START_KEY: start, SPAN_END_KEY: time.time()})
    return output


def make_launcher(rollout: RolloutGroup, own_pool: bool = False) -> GenerationLauncher:
    """The launcher for ``rollout``: a worker group that has the non-blocking generate; else a thread, which
    also carries the weight loads when the rollout has a pool of its own (``own_pool``: separate_async)."""
    if hasattr(rollout, "generate_sequences_nonblocking"):
        return RayGenerationLauncher(cast("NonBlockingRolloutGroup", rollout))
    return SerialRolloutLauncher(rollout) if own_pool else ThreadGenerationLauncher(rollout)


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


class _PendingRefs:
    """The refs of one ``receive_weights`` call, read like a Future (``done`` / ``result``)."""

    def __init__(self, refs: Any) -> None:
        self.refs = refs if isinstance(refs, list) else [refs]

    def done(self) -> bool:
        import ray

        return len(ray.wait(self.refs, num_returns=len(self.refs), timeout=0)[0]) == len(self.refs)

    def result(self) -> list[Any]:
        import ray

        return ray.get(self.refs)


def _receive(rollout_group: WeightReceiverGroup, package: object) -> list[Any]:
    """A serial job: the rollout's ranks load ``package``; returns their metrics once all are done."""
    return _PendingRefs(rollout_group.receive_weights(package)).result()


class WeightPusher:
    """separate_async's weight push (the wsync interface of issue 19): the actor's ranks publish a
    ``WeightPackage`` (buckets in Ray's object store), the rollout loads it, non-blocking.

    Args:
        serial: a ``SerialRolloutLauncher`` whose thread runs the loads in order with the generations (the
            agent loop); None: the load is enqueued on the rollout's workers, which Ray runs in submission order.
    """

    def __init__(self, actor_group: WeightPublisherGroup, rollout_group: WeightReceiverGroup,
                 serial: SerialRolloutLauncher | None = None) -> None:
        self.actor_group = actor_group
        self.rollout_group = rollout_group
        self.serial = serial
        self._pending: list[Any] = []  # receive_weights calls not reported yet (Future-like)

    def push(self, version: int) -> None:
        from hybridrl.workers.sharding_manager.weight_transfer import first_package

        package = first_package(self.actor_group.publish_weights(version))
        if self.serial is not None:
            self._pending.append(self.serial.submit(_receive, self.rollout_group, package))
        else:
            self._pending.append(_PendingRefs(self.rollout_group.receive_weights(package)))

    def finished_metrics(self, wait: bool = False) -> dict[str, float]:
        """Rank 0's metrics of the pushes the rollout has applied (all of them when ``wait``), summed over pushes,
        plus ``rollout/weight_pushes``."""
        done = 0
        metrics: dict[str, float] = {}
        for pending in self._pending:
            if not wait and not pending.done():
                break  # later pushes run after this one
            for key, value in (pending.result()[0] or {}).items():
                metrics[key] = metrics.get(key, 0.0) + float(value)
            done += 1
        self._pending = self._pending[done:]
        return {**metrics, "rollout/weight_pushes": float(done)} if done else {}
