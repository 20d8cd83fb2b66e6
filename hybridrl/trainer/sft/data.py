"""Datasets and data loaders of the SFT trainer.

Loaders shard by DATA-PARALLEL rank: with Ulysses SP (``ulysses_sequence_parallel_size = sp``) the
``rank``/``world_size`` passed here are ``dp_rank``/``dp = W / sp`` (``parallel.py``), so the sp ranks of
a group load the same samples, as in verl.

Train: ``DistributedSampler(shuffle=True, seed=trainer.seed, drop_last=True)`` → ``DataLoader`` of the
per-dp-rank batch, so an epoch is ``len(dataset) // global_batch`` steps and resuming at step k is exact
(set the epoch, skip ``k mod steps_per_epoch`` batches).

Validation: every sample exactly once. Dp rank r takes samples r, r + dp, r + 2·dp, …; ranks that run out
pad with a copy of sample 0 whose loss mask is zeroed, so every rank runs the same number of forwards
(FSDP collectives stay matched) and the padding adds nothing to the loss.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from hybridrl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
from hybridrl.utils.dataset.sft_dataset import SFTDataset
from hybridrl.utils.import_utils import load_extern_type

if TYPE_CHECKING:
    from omegaconf import DictConfig


def dataset_class(data_config: DictConfig) -> type:
    """``data.custom_cls`` if set, else MultiTurnSFTDataset when ``data.multiturn.enable``, else SFTDataset."""
    custom = data_config.get("custom_cls", None) or {}
    if custom.get("path"):
        cls = load_extern_type(custom["path"], str(custom.get("name")), key="data.custom_cls.path")
        if not (isinstance(cls, type) and issubclass(cls, Dataset)):
            raise TypeError(
                f"data.custom_cls.name={custom.get('name')!r} in {custom['path']} must be a torch "
                "Dataset subclass taking (parquet_files, tokenizer, config)."
            )
        return cls
    return MultiTurnSFTDataset if data_config.multiturn.enable else SFTDataset


def build_dataset(files: Any, tokenizer: Any, data_config: DictConfig) -> Dataset:
    """The SFT dataset of ``files`` (one path or a list), as chosen by :func:`dataset_class`."""
    return dataset_class(data_config)(files, tokenizer, data_config)


class ValidationShard(Dataset):
    """Dp rank ``rank``'s share of ``dataset``: ``ceil(n / world_size)`` items, padding with masked-out copies."""

    def __init__(self, dataset: Dataset, rank: int, world_size: int):
        self.dataset, self.rank, self.world_size = dataset, rank, world_size
        self.total = len(dataset)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return math.ceil(self.total / self.world_size)

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        index = item * self.world_size + self.rank
        if index < self.total:
            return self.dataset[index]
        padding = dict(self.dataset[0])
        padding["loss_mask"] = torch.zeros_like(padding["loss_mask"])
        return padding


def build_train_loader(dataset: Dataset, per_rank_batch: int, rank: int, world_size: int, seed: int) -> DataLoader:
    """Shuffled, sharded, ``drop_last`` loader of ``per_rank_batch`` samples per step on dp rank ``rank`` of
    ``world_size`` dp ranks."""
    if len(dataset) < per_rank_batch * world_size:  # type: ignore[arg-type]
        raise ValueError(
            f"the training set has {len(dataset)} samples, fewer than one global batch "  # type: ignore[arg-type]
            f"({per_rank_batch * world_size}); lower data.train_batch_size."
        )
    sampler: DistributedSampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    return DataLoader(dataset, batch_size=per_rank_batch, sampler=sampler, drop_last=True, num_workers=0)


def build_val_loader(dataset: Dataset, micro_batch: int, rank: int, world_size: int) -> DataLoader:
    """Unshuffled loader over :class:`ValidationShard` (dp rank ``rank`` of ``world_size``) in micro batches."""
    return DataLoader(ValidationShard(dataset, rank, world_size), batch_size=micro_batch, shuffle=False, num_workers=0)
