"""The bounded FIFO of generations in flight, each tagged with the policy version that produces it."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["GenerationBuffer", "InFlightBatch"]


@dataclass
class InFlightBatch:
    """One enqueued generation.

    Args:
        batch: the driver-side batch of its prompts (``uid`` set, the rollout's keys popped).
        result: blocks until the rollout's output DataProto is there, and returns it.
        version: the policy version that generates it.
        launch_step: the trainer step during which it was enqueued; with ``gen_batch_index`` it seeds sampling.
        gen_batch_index: its number among the generations enqueued during ``launch_step``.
    """

    batch: Any
    result: Callable[[], Any]
    version: int
    launch_step: int
    gen_batch_index: int


class GenerationBuffer:
    """Generations in flight, oldest first; at most ``capacity`` (the trainer consumes them in order)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._entries: deque[InFlightBatch] = deque()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def full(self) -> bool:
        return len(self._entries) >= self.capacity

    def put(self, entry: InFlightBatch) -> None:
        if self.full:
            raise RuntimeError(f"generation buffer is full ({self.capacity} in flight): the schedule over-launched")
        self._entries.append(entry)

    def pop_oldest(self) -> InFlightBatch:
        if not self._entries:
            raise RuntimeError("generation buffer is empty: no generation was enqueued for this step")
        return self._entries.popleft()

    def __iter__(self) -> Iterator[InFlightBatch]:
        return iter(self._entries)

    def versions(self) -> list[int]:
        """Versions of the entries, oldest first."""
        return [entry.version for entry in self._entries]
