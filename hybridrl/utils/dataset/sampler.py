"""Custom train samplers behind ``data.sampler.class_path`` / ``data.sampler.class_name`` (verl 0.5; verl's
import path ``verl.experimental.dataset.sampler`` is kept as ``hybridrl.experimental.dataset.sampler``).

``create_rl_sampler`` (:mod:`hybridrl.utils.dataset.rl_dataset`, also ``hybridrl.trainer.main_ppo``) builds the
named class as ``cls(data_source=train_dataset, data_config=config.data)``; it must subclass :class:`AbstractSampler`.
A :class:`AbstractCurriculumSampler` is also told about every trained batch: after each step the
trainer calls ``sampler.update(batch=batch)`` with that step's DataProto (rewards, advantages, ...), so
it can reorder what comes next. Such a sampler needs ``data.dataloader_num_workers=0``: loader workers
would prefetch indices before the update.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sized
from typing import TYPE_CHECKING, Any

from torch.utils.data import Sampler

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = ["AbstractCurriculumSampler", "AbstractSampler"]


class AbstractSampler(Sampler[int]):
    """A train sampler built from the dataset and the ``data`` config section."""

    @abstractmethod
    def __init__(self, data_source: Sized, data_config: DictConfig) -> None:
        pass


class AbstractCurriculumSampler(AbstractSampler):
    """A sampler updated with each trained batch (curriculum learning)."""

    @abstractmethod
    def update(self, batch: Any) -> None:
        """``batch``: the step's trained ``DataProto`` (rewards, advantages, ...)."""
