"""The checks a DataProto runs on its parts and on the arguments of its methods.

Failed checks raise ``AssertionError`` as verl's ``assert`` statements do (user code may catch it),
but explicitly, so they survive ``python -O``; messages keep verl's wording and add the offending key
and, for the canonical batch keys, the stage that adds them (:mod:`hybridrl.protocol.keys`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from hybridrl.protocol.keys import missing_key_hint

__all__ = ["as_key_list", "check_rows", "common_batch_size", "require", "require_batch", "require_batch_keys"]


def require(condition: bool, message: str) -> None:
    """``assert`` that survives ``python -O`` (verl raises AssertionError for these checks)."""
    if not condition:
        raise AssertionError(message)


def require_batch(batch: TensorDict | None, operation: str) -> TensorDict:
    """``batch`` itself, or an AssertionError naming ``operation`` if the DataProto has no tensor batch."""
    if batch is None:
        raise AssertionError(f"{operation}: this DataProto has no tensor batch (batch is None)")
    return batch


def require_batch_keys(batch: TensorDict, keys: Iterable[str], operation: str) -> None:
    """Every key of ``keys`` is in ``batch``; the message names the missing ones and who adds them."""
    missing = [key for key in keys if key not in batch.keys()]
    if missing:
        hints = "".join(missing_key_hint(key) for key in missing)
        raise AssertionError(f"{operation}: batch keys {missing} not found; available: {sorted(batch.keys())}{hints}")


def check_rows(batch: TensorDict | None, non_tensor_batch: dict[str, Any] | None) -> None:
    """DataProto invariant: one batch dim; non-tensor values are ndarrays of the batch's length."""
    if batch is not None:
        require(len(batch.batch_size) == 1, f"only support num_batch_dims=1, got batch_size {list(batch.batch_size)}")
    batch_size = batch.batch_size[0] if batch is not None else None
    for key, val in (non_tensor_batch or {}).items():
        require(
            isinstance(val, np.ndarray),
            "data in the non_tensor_batch must be a numpy.array with dtype=object, "
            f"but for key={key!r}, got type(val)={type(val)}",
        )
        if batch_size is not None:
            require(val.shape[0] == batch_size, f"key {key} length {len(val)} is not equal to batch size {batch_size}")


def as_key_list(keys: str | list[str] | None) -> list[str]:
    """``None`` → ``[]``, ``"a"`` → ``["a"]``, a list unchanged; anything else is a TypeError."""
    if keys is None:
        return []
    if isinstance(keys, str):
        return [keys]
    if isinstance(keys, list):
        return keys
    raise TypeError(f"keys must be a list or a string, but got {type(keys).__name__}")


def common_batch_size(tensors: dict[str, torch.Tensor], num_batch_dims: int) -> torch.Size | None:
    """The shared leading ``num_batch_dims`` dims of all tensors (``None`` if there are none)."""
    batch_size, pivot_key = None, None
    for key, tensor in tensors.items():
        current = tensor.shape[:num_batch_dims]
        if batch_size is None:
            batch_size, pivot_key = current, key
        require(
            current == batch_size,
            f"Not all the tensor in tensors have the same batch size with batch_dims={num_batch_dims}: "
            f"'{pivot_key}' has {list(batch_size)}, '{key}' has {list(current)}",
        )
    return batch_size
