"""The async batch source of a trainer (``trainer.v1.trainer_mode``): launcher, weight pusher, prompt stream, and
the sync step's generate / reward stages split around the enqueued generation."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo import stages
from hybridrl.trainer.ppo.async_pipeline import AsyncBatchSource, AsyncSettings
from hybridrl.trainer.ppo.async_pipeline.launchers import SerialRolloutLauncher, WeightPusher, make_launcher
from hybridrl.trainer.ppo.protocols import (
    RewardManager,
    RewardModelGroup,
    RolloutGroup,
    WeightPublisherGroup,
    WeightReceiverGroup,
)
from hybridrl.trainer.ppo.stages import TIMING_PREFIX, StepSettings
from hybridrl.trainer.ppo.worker_groups import WorkerGroups

__all__ = ["StageFunctions", "make_async_source", "prompt_stream"]


def prompt_stream(dataloader: Iterable[dict]) -> Iterator[DataProto]:
    """The dataloader's batches over as many epochs as asked for (a restored dataloader resumes mid-epoch)."""
    for _ in itertools.count():
        for batch_dict in dataloader:
            yield DataProto.from_single_dict(batch_dict)


@dataclass(frozen=True)
class StageFunctions:
    """``stages.generate`` and ``stages.reward`` of the sync step, split around the enqueued generation."""

    rollout: RolloutGroup  # what generates (the agent-loop manager reads every column of its rows)
    settings: StepSettings
    reward_fn: RewardManager
    rm: RewardModelGroup | None
    actor_world_size: int  # rows are balanced over the actor's ranks

    @property
    def score_calls_workers(self) -> bool:
        return self.rm is not None

    def prepare(self, prompts: DataProto, launch_step: int, gen_batch_index: int) -> tuple[DataProto, DataProto]:
        batch, gen_batch = stages.prepare_generation(prompts, self.rollout, self.settings, global_steps=launch_step,
                                                     gen_batch_index=gen_batch_index)
        return batch, gen_batch.repeat(self.settings.rollout_n, interleave=True)

    def score(self, batch: DataProto, output: DataProto, wait_s: float) -> tuple[DataProto, dict[str, Any]]:
        batch, gen_metrics = stages.finish_generation(batch, output, self.settings, self.actor_world_size,
                                                      {TIMING_PREFIX + "gen": wait_s})
        batch, reward_metrics = stages.reward(batch, self.reward_fn, rm=self.rm)
        return batch, {**gen_metrics, **reward_metrics}


def make_async_source(settings: AsyncSettings, workers: WorkerGroups, dataloader: Iterable[dict],
                      step_settings: StepSettings, reward_fn: RewardManager) -> AsyncBatchSource:
    """colocate_async: generations on the actor's own group (hybrid engine); separate_async: on the rollout's
    pool, with weight pushes from the actor (with the agent loop, generations and loads share one driver thread)."""
    rollout = workers.rollout
    launcher = make_launcher(rollout, own_pool=not settings.colocated)
    pusher = None
    if not settings.colocated:
        if workers.standalone_rollout is None:
            raise ValueError("trainer.v1.trainer_mode=separate_async needs a rollout worker group on its own pool "
                             "(Role.Rollout in role_worker_mapping; main_ppo builds it from "
                             "actor_rollout_ref.rollout.nnodes / n_gpus_per_node)")
        serial = launcher if isinstance(launcher, SerialRolloutLauncher) else None  # the agent loop
        # the policy worker's groups, whose worker class has the weight-transfer methods
        actor = cast(WeightPublisherGroup, workers.actor_rollout)
        rollout_group = cast(WeightReceiverGroup, workers.standalone_rollout)
        pusher = WeightPusher(actor, rollout_group, serial)
    step = StageFunctions(rollout, step_settings, reward_fn, workers.rm, workers.actor_rollout.world_size)
    return AsyncBatchSource(settings, launcher, prompt_stream(dataloader), step, pusher)
