"""Padding a DataProto to a multiple of a divisor and trimming it back.

Used around validation generation (``pad_dataproto_to_divisor`` to the rollout world size, then
``unpad_dataproto`` on the output) and by the worker-group dispatch when auto padding is on
(:mod:`hybridrl.protocol.auto_padding`); ``DataProto.padding`` pads in place with copies of one row.
"""

from __future__ import annotations

import logging

from hybridrl.protocol.checks import require
from hybridrl.protocol.data_proto import DataProto

__all__ = ["pad_dataproto_to_divisor", "unpad_dataproto"]

logger = logging.getLogger(__name__)

# verl's worker-call kwarg that carries the pad count from the dispatch to the worker group, which
# pops it and trims the collected output. hybridrl.single_controller keeps the same string as
# PADDING_SIZE_KEY (that package must not import torch); a test checks they agree.
_padding_size_key = "_padding_size_key_x123d"


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Append leading rows (cycling from row 0) until ``len(data) % size_divisor == 0``.

    Example: rows ``[a, b, c]``, divisor 7 → ``[a, b, c, a, b, c, a]``, pad size 4.

    Returns:
        ``(padded, pad_size)``; ``unpad_dataproto(padded, pad_size)`` restores ``data``.
    """
    require(isinstance(data, DataProto), f"data must be a DataProto, got {type(data).__name__}")
    if len(data) % size_divisor == 0:
        if len(data) == 0:
            logger.warning("padding a DataProto with no item, no change made")
        return data, 0
    pad_size = size_divisor - len(data) % size_divisor
    parts, remaining = [data], pad_size
    while remaining > 0:
        take = min(remaining, len(data))
        parts.append(data[:take])
        remaining -= take
    return type(data).concat(parts), pad_size


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the last ``pad_size`` rows (``data[:-pad_size]``); no-op for 0."""
    return data[:-pad_size] if pad_size != 0 else data
