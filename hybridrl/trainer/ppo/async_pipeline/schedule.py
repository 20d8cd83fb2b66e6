"""The async modes' schedule as pure logic: policy versions, staleness, when a generation may be enqueued.

Notation (versions count actor updates, i.e. trainer steps done):

    trainer_version   updates done so far; step t trains with the actor at version t - 1
    rollout_version   the weights a generation enqueued *now* will use: colocate_async: the actor's (the hybrid
                      engine syncs before each generate); separate_async: the last version pushed to the rollout
    staleness         trainer_version at the update - version that generated the batch   (sync: always 0)

The driver only *schedules*: Ray runs an actor's calls in submission order, so a batch's version is fixed by the
order in which generations, updates and weight pushes are enqueued, never by timing. Hence every decision below
is a function of counters, and a run (and its resume) repeats exactly.

verl 0.9 measures the same gap as a span (versions a trajectory covers, staleness + 1) and evicts spans over
``max_off_policy_threshold``; hybridrl compares the staleness itself with the threshold (docs/async-training.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = ["AsyncSettings", "VersionClock", "may_launch", "predicted_staleness", "should_drop"]



@dataclass(frozen=True)
class AsyncSettings:
    """``trainer.v1`` resolved once (the YAML holds the defaults; none are restated here)."""

    mode: str  # colocate_async | separate_async
    depth: int  # <mode>.num_warmup_batches: batches generated ahead of the one being trained
    sync_every: int  # separate_async.parameter_sync_step; colocate_async: 1 (the engine follows every update)
    max_staleness: int  # sampler.max_off_policy_threshold
    strategy: str  # sampler.max_off_policy_strategy: drop | wait

    @property
    def colocated(self) -> bool:
        return self.mode == "colocate_async"

    @classmethod
    def from_config(cls, trainer_config: DictConfig) -> AsyncSettings | None:
        """The settings of ``trainer.v1``; None in ``sync`` mode (verl 0.5's loop, unchanged)."""
        v1 = trainer_config.v1
        if v1.trainer_mode == "sync":
            return None
        mode_section = v1[v1.trainer_mode]
        sync_every = 1 if v1.trainer_mode == "colocate_async" else int(mode_section.parameter_sync_step)
        return cls(mode=v1.trainer_mode, depth=int(mode_section.num_warmup_batches), sync_every=sync_every,
                   max_staleness=int(v1.sampler.max_off_policy_threshold),
                   strategy=str(v1.sampler.max_off_policy_strategy))


@dataclass
class VersionClock:
    """The two versions the schedule tracks (see the module docstring)."""

    trainer_version: int
    rollout_version: int

    def after_update(self, settings: AsyncSettings) -> bool:
        """Count one actor update; True when a weight push to the rollout is due (separate_async, every
        ``sync_every`` updates). Colocated, the rollout follows the actor at once."""
        self.trainer_version += 1
        if settings.colocated:
            self.rollout_version = self.trainer_version
            return False
        return self.trainer_version % settings.sync_every == 0

    def staleness(self, batch_version: int) -> int:
        """Staleness of a batch trained *now* (by the next update)."""
        return self.trainer_version - batch_version


def predicted_staleness(train_step: int, rollout_version: int) -> int:
    """Staleness of a batch generated at ``rollout_version`` and trained at step ``train_step`` (1-based), which
    updates the actor from version ``train_step - 1``."""
    return train_step - 1 - rollout_version


def may_launch(settings: AsyncSettings, train_step: int, rollout_version: int, last_step: int) -> bool:
    """Whether to enqueue now the generation of the batch that step ``train_step`` will train on.

    Never past ``last_step`` (the next save / validation step or the run's end: those are pipeline barriers);
    with ``wait``, never a batch that would be trained over the staleness threshold (it is enqueued later,
    after newer weights, and the trainer waits for it instead).
    """
    if train_step > last_step:
        return False
    if settings.strategy == "wait":
        return predicted_staleness(train_step, rollout_version) <= settings.max_staleness
    return True


def should_drop(settings: AsyncSettings, staleness: int) -> bool:
    """``drop``: a batch over the threshold is discarded (its prompts are not trained on) and the next is taken."""
    return settings.strategy == "drop" and staleness > settings.max_staleness
