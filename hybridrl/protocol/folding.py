"""Folding a DataProto's batch dim: ``[B, ...]`` ⇄ ``[G, B // G, ...]`` (e.g. G prompt groups of n responses).

The folded DataProto keeps one batch dim of size ``G``; each tensor gains a second dim ``B // G``
and each non-tensor array is reshaped the same way, so row operations move whole groups.
"""

from __future__ import annotations

import numpy as np

from hybridrl.protocol.checks import require
from hybridrl.protocol.data_proto import DataProto

__all__ = ["fold_batch_dim", "unfold_batch_dim"]


def fold_batch_dim(data: DataProto, new_batch_size: int) -> DataProto:
    """``[B, ...]`` → ``[new_batch_size, B // new_batch_size, ...]``; the batch dim stays the first one."""
    batch_size = len(data)
    require(batch_size % new_batch_size == 0, f"batch size {batch_size} is not divisible by {new_batch_size}")
    batch = None
    if data.batch is not None:
        batch = data.batch.view(new_batch_size, -1)
        batch.auto_batch_size_(batch_dims=1)
    non_tensor = {
        key: np.reshape(val, (new_batch_size, -1, *val.shape[1:])) for key, val in data.non_tensor_batch.items()
    }
    return type(data)(batch=batch, non_tensor_batch=non_tensor, meta_info=data.meta_info)


def unfold_batch_dim(data: DataProto, batch_dims: int = 2) -> DataProto:
    """Merge the first ``batch_dims`` dims into one batch dim (inverse of :func:`fold_batch_dim`)."""
    batch = None
    if data.batch is not None:
        data.batch.auto_batch_size_(batch_dims=batch_dims)
        batch = data.batch.view(-1)
    leading = None if batch is None else int(batch.batch_size[0])
    non_tensor = {}
    for key, val in data.non_tensor_batch.items():
        rows = leading if leading is not None else int(np.prod(val.shape[:batch_dims]))
        non_tensor[key] = np.reshape(val, (rows, *val.shape[batch_dims:]))
    return type(data)(batch=batch, non_tensor_batch=non_tensor, meta_info=data.meta_info)
