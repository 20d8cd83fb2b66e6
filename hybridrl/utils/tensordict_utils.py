"""Building a ``TensorDict`` that carries Python objects, with verl 0.9's ``get_tensordict``
(``verl.utils.tensordict_utils``); :meth:`hybridrl.protocol.DataProto.to_tensordict` builds on it."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

__all__ = ["get_tensordict"]


def _rows(value: Any) -> int:
    return value.size(0) if isinstance(value, torch.Tensor) else len(value)


def get_tensordict(tensor_dict: dict[str, Any], non_tensor_dict: dict[str, Any] | None = None) -> TensorDict:
    """A TensorDict of batch size ``[B]`` from per-row entries and whole-batch values.

    Args:
        tensor_dict: key → a tensor ``[B, ...]``, a list / object array of B Python objects (kept per row as a
            NonTensorStack: lists of lists, dicts, strings), or a NonTensorStack.
        non_tensor_dict: key → one value for the whole batch (a NonTensorData), e.g. a DataProto's meta_info.

    Raises:
        ValueError: entries with different numbers of rows, a list holding tensors, a key in both dicts, or a value
            of another type.
    """
    source: dict[str, Any] = {}
    batch_size: int | None = None
    for key, value in tensor_dict.items():
        if isinstance(value, (list, np.ndarray)) and not isinstance(value, NonTensorStack):
            if any(isinstance(item, torch.Tensor) for item in value):
                raise ValueError(f"get_tensordict: {key!r} is a list of tensors; stack them, or convert to numpy first")
            value = NonTensorStack.from_list([NonTensorData(item) for item in value])
        elif not isinstance(value, (torch.Tensor, NonTensorStack)):
            raise ValueError(f"get_tensordict: {key!r} is a {type(value).__name__}; give a tensor, a list or an array")
        rows = _rows(value)
        if batch_size is not None and rows != batch_size:
            raise ValueError(f"get_tensordict: {key!r} has {rows} rows, the entries before it {batch_size}")
        batch_size, source[key] = rows, value
    for key, value in (non_tensor_dict or {}).items():
        if key in source:
            raise ValueError(f"get_tensordict: {key!r} is in both tensor_dict and non_tensor_dict")
        source[key] = NonTensorData(value)
    return TensorDict(source, batch_size=[] if batch_size is None else [batch_size])
