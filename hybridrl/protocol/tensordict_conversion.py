"""A DataProto as one ``TensorDict`` and back (verl 0.9's ``DataProto.to_tensordict`` / ``from_tensordict``).

verl 0.9's newer workers pass plain TensorDicts; a DataProto maps onto one as:

    batch[key]             tensor [B, ...]       →  the same tensor
    non_tensor_batch[key]  object array [B]      →  NonTensorStack of B NonTensorData (lists, dicts, strings kept)
    meta_info[key]         any value             →  NonTensorData (one value for the whole batch)

Back, each entry is sorted by its type the same way; the object arrays are rebuilt element by element, so rows
that are lists of equal length stay one list per row (``np.array`` would make them a 2-D array).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from hybridrl.utils.tensordict_utils import get_tensordict

__all__ = ["from_tensordict_parts", "to_tensordict"]


def _object_array(items: list[Any]) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    for index, item in enumerate(items):
        array[index] = item
    return array


def to_tensordict(
    batch: TensorDict | None, non_tensor_batch: dict[str, np.ndarray], meta_info: dict[str, Any], length: int
) -> TensorDict:
    """One TensorDict of batch size ``[length]`` holding the three parts of a DataProto (see the module docstring).

    Raises:
        ValueError: a key is in more than one part (the TensorDict has one namespace).
    """
    tensors = batch.to_dict() if batch is not None else {}
    parts = (set(tensors), set(non_tensor_batch), set(meta_info))
    shared = (parts[0] & parts[1]) | (parts[0] & parts[2]) | (parts[1] & parts[2])
    if shared:
        raise ValueError(
            f"to_tensordict: keys {sorted(shared)} are in more than one of batch / non_tensor_batch / meta_info"
        )
    td = get_tensordict({**tensors, **non_tensor_batch}, meta_info)
    if td.batch_size != torch.Size([length]):  # a DataProto without rows in any part
        td.batch_size = [length]
    return td


def from_tensordict_parts(
    tensor_dict: TensorDict, meta_info: dict[str, Any] | None = None, num_batch_dims: int = 1
) -> tuple[TensorDict, dict[str, np.ndarray], dict[str, Any]]:
    """``(batch, non_tensor_batch, meta_info)`` of a TensorDict: tensors, per-row NonTensorStacks, and
    NonTensorData (merged into ``meta_info``). The batch keeps the first ``num_batch_dims`` dims as batch dims.

    Raises:
        ValueError: ``num_batch_dims`` < 1, or > 1 with non-tensor entries (their rows are one-dimensional).
    """
    if num_batch_dims < 1:
        raise ValueError(f"num_batch_dims must be >= 1, got {num_batch_dims}")
    tensors: dict[str, torch.Tensor] = {}
    non_tensors: dict[str, np.ndarray] = {}
    meta = dict(meta_info or {})
    for key, value in tensor_dict.items():
        if isinstance(value, torch.Tensor):
            tensors[key] = value
        elif isinstance(value, NonTensorStack):
            non_tensors[key] = _object_array([element.data for element in value])
        elif isinstance(value, NonTensorData):
            meta[key] = value.data
    if num_batch_dims > 1 and non_tensors:
        raise ValueError("from_tensordict: num_batch_dims > 1 needs a TensorDict of tensors only")
    first = next(iter(tensors.values()), None)
    batch_size = first.shape[:num_batch_dims] if first is not None else tensor_dict.batch_size[:num_batch_dims]
    return TensorDict(tensors, batch_size=batch_size), non_tensors, meta
