"""The actor interface every PPO actor backend implements (verl's ``BasePPOActor``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from hybridrl.protocol import DataProto

__all__ = ["BasePPOActor"]


class BasePPOActor(ABC):
    """A policy that scores tokens and learns from a PPO batch.

    Args:
        config: the ``actor_rollout_ref.actor`` (or ``.ref``) config section.
    """

    def __init__(self, config: Any) -> None:
        self.config = config

    @abstractmethod
    def compute_log_prob(
        self, data: DataProto, calculate_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs ``[B, R]`` of ``data.batch["responses"]`` (and entropies ``[B, R]`` if asked)."""

    @abstractmethod
    def update_policy(self, data: DataProto) -> dict[str, list[float]]:
        """Run the PPO update on ``data``; return metrics as a dict of lists (verl names)."""
