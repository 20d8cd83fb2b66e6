"""Reduce per-micro-batch / per-rank metric lists to one value per key.

Rule (verl): the mean of the list, except keys containing ``"max"`` take the max and keys
containing ``"min"`` take the min, so ``perf/max_memory_allocated_gb`` reports the peak over
ranks rather than an average of peaks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["reduce_metrics"]


def _reducer_for(key: str) -> Callable[[Any], Any]:
    if "max" in key:
        return np.max
    if "min" in key:
        return np.min
    return np.mean


def reduce_metrics(metrics: Mapping[str, Sequence[Any] | Any]) -> dict[str, float]:
    """``{key: [v1, v2, ...]}`` → ``{key: reduced}``; a scalar value is kept as is, an empty list gives NaN.

    Example:
        >>> reduce_metrics({"actor/pg_loss": [1.0, 3.0], "perf/max_memory_allocated_gb": [2.0, 5.0]})
        {'actor/pg_loss': 2.0, 'perf/max_memory_allocated_gb': 5.0}
    """
    reduced: dict[str, float] = {}
    for key, values in metrics.items():
        array = np.asarray(values, dtype=np.float64)
        reduced[key] = float("nan") if array.size == 0 else float(_reducer_for(key)(array))
    return reduced
