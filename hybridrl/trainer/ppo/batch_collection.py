"""Batch collection: how a step's scored batch is made from the dataloader's prompt batches (a trainer part).

    dataloader batch ─► BatchCollector.collect(prompts, rollout) ─► (scored batch, metrics)   the step runs on
                                   │                             └► (None, {})               fit fetches more
                                   └─ rollout(prompts, gen_batch_index): generate ─► reward

The default, :class:`OneGenerationBatch`, is verl's: one generation batch per step. A recipe passes its own
collector to the trainer (``RayPPOTrainer(..., batch_collector=...)``); DAPO's dynamic sampling accumulates
the filtered groups of several generation batches (``hybridrl.recipes.dapo.dapo_ray_trainer``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo import stages
from hybridrl.trainer.ppo.protocols import RewardManager
from hybridrl.trainer.ppo.stages import StepSettings
from hybridrl.trainer.ppo.worker_groups import WorkerGroups

__all__ = ["BatchCollector", "OneGenerationBatch", "Rollout"]


@dataclass(frozen=True)
class Rollout:
    """generate → reward on one generation batch, bound to one step's worker groups, settings and number."""

    workers: WorkerGroups  # workers.rollout generates; rm (if any) scores before the reward function
    settings: StepSettings
    reward_fn: RewardManager  # the training reward manager
    global_steps: int  # the step being collected (the rollout seeds by it)

    def __call__(self, prompts: DataProto, gen_batch_index: int = 0) -> tuple[DataProto, dict[str, Any]]:
        """The scored batch of ``prompts`` (``rollout.n`` responses each) and the stages' metrics."""
        batch, gen_metrics = stages.generate(
            prompts, self.workers.rollout, self.settings, global_steps=self.global_steps,
            gen_batch_index=gen_batch_index, reward_fn=self.reward_fn,
        )
        batch, reward_metrics = stages.reward(batch, self.reward_fn, rm=self.workers.rm)
        return batch, {**gen_metrics, **reward_metrics}

    def rebalance(self, batch: DataProto) -> tuple[DataProto, dict[str, Any]]:
        """Balance rows over the actor's ranks again and recount ``global_token_num`` (for rows merged from
        several generation batches)."""
        world_size = self.workers.rollout.world_size
        return stages.finalize_rollout_batch(batch, world_size, self.settings.balance_batch)


class BatchCollector(Protocol):
    """Turns each prompt batch of the dataloader into the step's scored batch, or None while it needs more."""

    def collect(self, prompts: DataProto, rollout: Rollout) -> tuple[DataProto | None, dict[str, Any]]:
        """``(batch, metrics)`` for the step, or ``(None, {})`` to be called again with the next prompt batch."""
        ...


class OneGenerationBatch:
    """verl's default: the step trains on the responses to exactly one dataloader batch."""

    def collect(self, prompts: DataProto, rollout: Rollout) -> tuple[DataProto | None, dict[str, Any]]:
        return rollout(prompts)
