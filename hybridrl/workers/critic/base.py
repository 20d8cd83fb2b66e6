"""The critic interface every value-model backend implements (verl's ``BasePPOCritic``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from hybridrl.protocol import DataProto

__all__ = ["BasePPOCritic"]


class BasePPOCritic(ABC):
    """A value model: per-token values of the response and a clipped value-loss update.

    Args:
        config: the ``critic`` config section.
    """

    def __init__(self, config: Any) -> None:
        self.config = config

    @abstractmethod
    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values ``[B, R]`` of the response positions, zero outside ``response_mask``."""

    @abstractmethod
    def update_critic(self, data: DataProto) -> dict[str, list[float]]:
        """Fit the values to ``returns``; return metrics as a dict of lists (verl names)."""
