"""``AsyncBatchSource``: each step's scored batch in colocate_async / separate_async.

One step t of the trainer, as the source sees it (k = num_warmup_batches)::

    next_batch(t)     fill: enqueue generations until the batches of steps t .. t+k are in flight (not past the
                            next barrier; ``wait``: none that would be trained over the threshold)
                      take the oldest (the trainer idles here if it is not done); ``drop``: too stale → next
                      fill again, so the next generations run while the driver scores this batch and the
                      workers update (colocated: they queue behind this step's updates' inputs)
                      finish: union, response_mask, balance; reward
    (the trainer updates the models)
    after_update(t)   count the version; separate_async: push the weights every parameter_sync_step updates and
                      at barriers; fill (``wait``: the generations held back for newer weights)

Barriers (save and validation steps, the last step) drain the pipeline: no generation is enqueued for a step after
the next barrier, so a checkpoint holds no batch in flight, the dataloader state is exactly the consumed batches,
and a resumed run repeats the uninterrupted one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol

from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo.async_pipeline.buffer import GenerationBuffer, InFlightBatch
from hybridrl.trainer.ppo.async_pipeline.launchers import GenerationLauncher, WeightPusher, pop_rollout_span
from hybridrl.trainer.ppo.async_pipeline.metrics import PREFIX, AsyncStats
from hybridrl.trainer.ppo.async_pipeline.schedule import AsyncSettings, VersionClock, may_launch, should_drop

__all__ = ["AsyncBatchSource", "StepFunctions"]


class StepFunctions(Protocol):
    """The driver's halves of the sync step's generate stage, around the enqueued generation
    (``hybridrl.trainer.ppo.async_source`` binds them to ``stages``)."""

    @property
    def score_calls_workers(self) -> bool:  # score() calls worker groups (a reward model)
        ...

    def prepare(self, prompts: DataProto, launch_step: int, gen_batch_index: int) -> tuple[Any, DataProto]:
        """``(driver-side batch, what the rollout is sent)``; the step and index seed the sampling."""
        ...

    def score(self, batch: Any, output: DataProto, wait_s: float) -> tuple[DataProto, dict[str, Any]]:
        """Join the rollout's output to the batch, balance it, reward it; the metrics (``timing_s/gen`` = wait_s)."""
        ...


class AsyncBatchSource:
    """Generations ahead of training, with versions, staleness control and metrics.

    Args:
        settings: ``trainer.v1`` resolved.
        launcher: enqueues a generation and returns its result getter (``launchers.py``).
        prompt_batches: the dataloader's prompt batches, over epochs.
        step: prepare a generation's input / score its output on the driver.
        pusher: separate_async's weight push; None colocated.
    """

    def __init__(self, settings: AsyncSettings, launcher: GenerationLauncher, prompt_batches: Iterator[DataProto],
                 step: StepFunctions, pusher: WeightPusher | None = None) -> None:
        self.settings, self.launcher, self.prompt_batches = settings, launcher, prompt_batches
        self.step, self.pusher = step, pusher
        self.buffer = GenerationBuffer(capacity=settings.depth + 1)
        self.stats = AsyncStats()
        self.clock = VersionClock(0, 0)
        self._launch_step, self._launch_index = 0, 0

    def start(self, global_steps: int) -> None:
        """Start at ``global_steps`` updates done (a resume: the rollout pool gets the restored weights first)."""
        self.clock = VersionClock(global_steps, global_steps)
        if self.pusher is not None and global_steps > 0:
            self.pusher.push(global_steps)

    # ------------------------------------------------------------------ one step
    def next_batch(self, step: int, last_step: int) -> tuple[DataProto, dict[str, Any]]:
        """The scored batch step ``step`` trains on; ``last_step``: the next barrier (nothing is enqueued past it)."""
        idle, dropped_batches, dropped_prompts = 0.0, 0, 0
        while True:
            self._fill(step, last_step, head_taken=False)
            entry = self.buffer.pop_oldest()
            start = time.perf_counter()
            output = entry.result()
            idle += time.perf_counter() - start
            staleness = self.clock.staleness(entry.version)
            if not should_drop(self.settings, staleness):
                break
            dropped_batches, dropped_prompts = dropped_batches + 1, dropped_prompts + len(entry.batch)
        self._fill(step, last_step, head_taken=True)  # runs while the driver scores this batch and trains on it
        if staleness > self.settings.max_staleness:
            raise RuntimeError(f"internal: step {step} got a batch {staleness} versions stale, over "
                               f"trainer.v1.sampler.max_off_policy_threshold={self.settings.max_staleness}")
        metrics = {**self.stats.dropped(dropped_batches, dropped_prompts), **self.stats.trained(staleness),
                   **self.stats.rollout_idle(pop_rollout_span(output)),
                   PREFIX + "trainer_idle_s": idle, PREFIX + "buffer_size": len(self.buffer)}
        if self.step.score_calls_workers:
            self._join_if_needed()  # a reward model's calls must not interleave with a thread's generate calls
        batch, step_metrics = self.step.score(entry.batch, output, idle)
        self._join_if_needed()
        return batch, {**step_metrics, **metrics}

    def after_update(self, step: int, last_step: int, barrier: bool) -> dict[str, Any]:
        """Count the update; push weights when due (and at a barrier); enqueue held-back generations."""
        push_due = self.clock.after_update(self.settings)
        behind = self.clock.rollout_version != self.clock.trainer_version
        metrics: dict[str, Any] = {}
        if self.pusher is not None and (push_due or (barrier and behind)):
            start = time.perf_counter()
            self.pusher.push(self.clock.trainer_version)  # blocks while the actor publishes; the load is queued
            metrics[PREFIX + "weight_publish_s"] = time.perf_counter() - start
            self.clock.rollout_version = self.clock.trainer_version
        self._fill(step, last_step, head_taken=True)
        if barrier and len(self.buffer):
            raise RuntimeError(f"internal: {len(self.buffer)} generation(s) in flight at barrier step {step}")
        if self.pusher is not None:
            metrics.update(self.pusher.finished_metrics(wait=barrier))
        return {**metrics, PREFIX + "trainer_version": self.clock.trainer_version,
                PREFIX + "rollout_version": self.clock.rollout_version}

    def close(self) -> None:
        self.launcher.close()

    # ------------------------------------------------------------------ enqueueing
    def _fill(self, step: int, last_step: int, head_taken: bool) -> None:
        """Enqueue generations for steps ``next .. step + depth`` while the schedule allows."""
        next_train_step = step + int(head_taken)
        while True:
            train_step = next_train_step + len(self.buffer)
            if train_step > step + self.settings.depth:
                return
            if not may_launch(self.settings, train_step, self.clock.rollout_version, last_step):
                return
            self._launch(step)

    def _launch(self, step: int) -> None:
        if self._launch_step != step:
            self._launch_step, self._launch_index = step, 0
        prompts = next(self.prompt_batches)
        batch, gen_batch = self.step.prepare(prompts, step, self._launch_index)
        result = self.launcher.launch(gen_batch)
        self.buffer.put(InFlightBatch(batch, result, self.clock.rollout_version, step, self._launch_index))
        self._launch_index += 1

    def _join_if_needed(self) -> None:
        """A thread launcher: wait until the generations in flight are done (their results stay cached)."""
        if self.launcher.joins_before_worker_calls:
            for entry in self.buffer:
                entry.result()
