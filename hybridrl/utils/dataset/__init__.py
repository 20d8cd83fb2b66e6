"""Datasets: RL prompts (:class:`RLHFDataset`, with images through :mod:`hybridrl.utils.dataset.vision`),
SFT pairs (:class:`SFTDataset`), multi-turn SFT."""

from hybridrl.utils.dataset.rl_dataset import RLHFDataset, collate_fn, create_rl_sampler
from hybridrl.utils.dataset.sft_dataset import SFTDataset

__all__ = ["RLHFDataset", "SFTDataset", "collate_fn", "create_rl_sampler"]
