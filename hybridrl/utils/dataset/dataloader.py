"""The resumable train dataloader (torchdata ``StatefulDataLoader``) and an epoch-boundary-safe restore.

verl's loop is ``for epoch in range(current_epoch, total_epochs): for batch in loader``. A loader
state saved right after the last batch of an epoch restores to an *empty* remainder of that epoch,
so that epoch iteration yields nothing and, on the last epoch, the run trains 0 steps and exits
(verl#7401). :func:`load_dataloader_state` consumes that empty remainder, so the next ``iter()``
starts the next epoch with exactly the order an uninterrupted run would have used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from hybridrl.utils.config_defaults import section_with_defaults
from hybridrl.utils.dataset.rl_dataset import collate_fn as default_collate_fn
from hybridrl.utils.dataset.rl_dataset import create_rl_sampler

if TYPE_CHECKING:
    from omegaconf import DictConfig


def create_train_dataloader(
    data_config: DictConfig, dataset: Dataset, collate_fn=default_collate_fn
) -> StatefulDataLoader:
    """verl's train loader: ``batch_size = data.gen_batch_size or data.train_batch_size``, ``drop_last=True``."""
    data_config = section_with_defaults(data_config, "data")
    batch_size = data_config.gen_batch_size or data_config.train_batch_size
    return StatefulDataLoader(
        dataset=dataset,
        batch_size=int(batch_size),
        num_workers=int(data_config.dataloader_num_workers),
        drop_last=True,
        collate_fn=collate_fn,
        sampler=create_rl_sampler(data_config, dataset),
    )


def load_dataloader_state(loader: StatefulDataLoader, state: dict) -> bool:
    """Restore ``state``; return True if it was saved at the end of an epoch (the loader then starts the next one)."""
    loader.load_state_dict(state)
    at_epoch_end = int(state.get("_num_yielded", 0)) >= len(loader) and not state.get("_iterator_finished", False)
    if at_epoch_end:
        leftover = next(iter(loader), None)  # the empty remainder of the finished epoch
        if leftover is not None:
            raise RuntimeError("dataloader state claimed an epoch end but the epoch still had batches")
    return at_epoch_end
