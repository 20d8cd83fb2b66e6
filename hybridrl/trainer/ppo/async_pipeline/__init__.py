"""The async trainer modes of verl 0.9 (``trainer.v1.trainer_mode``): colocate_async and separate_async.

    schedule.py      versions, staleness, when a generation may be enqueued (pure)
    buffer.py        the bounded FIFO of generations in flight, tagged with their versions (pure)
    metrics.py       staleness histogram, dropped batches, buffer size, trainer / rollout idle time (pure)
    launchers.py     enqueue a generation without waiting; separate_async's weight push
    batch_source.py  AsyncBatchSource: each step's scored batch, barriers at save / validation steps

``hybridrl.trainer.ppo.async_source`` builds the source for a trainer's mode and worker groups (this package
imports nothing of the trainer: the step's driver work comes in as functions).

docs/async-training.md describes the modes, their metrics and how exact resume works.
"""

from hybridrl.trainer.ppo.async_pipeline.batch_source import AsyncBatchSource
from hybridrl.trainer.ppo.async_pipeline.schedule import AsyncSettings

__all__ = ["AsyncBatchSource", "AsyncSettings"]
