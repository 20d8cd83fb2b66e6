"""Merging DataProto parts: the unions behind ``DataProto.union`` (shared keys must hold equal values)
and the meta-info merge behind ``DataProto.concat`` (per-worker metrics and timings are gathered).

All public names are re-exported from :mod:`hybridrl.protocol` (verl keeps them in ``verl/protocol.py``;
``union_two_dict`` lives in ``verl.utils.py_functional`` there, and here too).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from hybridrl.protocol.checks import require
from hybridrl.utils.py_functional import deep_equal, union_two_dict

__all__ = [
    "list_of_dict_to_dict_of_list",
    "merge_meta_info",
    "union_numpy_dict",
    "union_tensor_dict",
    "union_two_dict",
]


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor | np.ndarray):
        return f"shape {list(value.shape)} dtype {value.dtype}"
    return repr(value)[:80]


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add the keys of ``tensor_dict2`` to ``tensor_dict1`` (in place); shared keys must be equal.

    Raises:
        AssertionError: batch sizes differ, or a shared key holds different tensors (message names
            the key and both shapes).
    """
    require(
        tensor_dict1.batch_size == tensor_dict2.batch_size,
        f"union: two tensor dicts must have identical batch size, got {list(tensor_dict1.batch_size)} "
        f"and {list(tensor_dict2.batch_size)}",
    )
    for key in tensor_dict2.keys():
        if key not in tensor_dict1.keys():
            tensor_dict1[key] = tensor_dict2[key]
            continue
        left, right = tensor_dict1[key], tensor_dict2[key]
        require(
            left.equal(right),
            f"union: conflicting values for batch key '{key}' ({_describe(left)} vs {_describe(right)}); "
            "pop or rename one of them before the union",
        )
    return tensor_dict1


def union_numpy_dict(tensor_dict1: dict[str, np.ndarray], tensor_dict2: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add the arrays of ``tensor_dict2`` to ``tensor_dict1`` (in place); shared keys must be deep-equal."""
    for key, val in tensor_dict2.items():
        if key in tensor_dict1:
            require(isinstance(val, np.ndarray), f"union: non_tensor_batch['{key}'] must be a numpy array")
            require(
                deep_equal(tensor_dict1[key], val),
                f"union: conflicting values for non_tensor_batch key '{key}' "
                f"({_describe(tensor_dict1[key])} vs {_describe(val)})",
            )
        tensor_dict1[key] = val
    return tensor_dict1


def list_of_dict_to_dict_of_list(list_of_dict: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """``[{a: 1}, {a: 2}]`` → ``{a: [1, 2]}``; every dict must carry the first dict's keys."""
    if not list_of_dict:
        return {}
    output: dict[str, list[Any]] = {key: [] for key in list_of_dict[0]}
    for data in list_of_dict:
        for key, item in data.items():
            require(key in output, f"key '{key}' is missing from the first dict (keys {sorted(output)})")
            output[key].append(item)
    return output


def _mean_timing(timings: list[dict[str, float]]) -> dict[str, float]:
    """Per-key mean of per-worker timing dicts (what verl's ``reduce_timing`` all-reduce AVG yields)."""
    keys = dict.fromkeys(key for timing in timings for key in timing)
    return {key: sum(t[key] for t in timings if key in t) / sum(key in t for t in timings) for key in keys}


def merge_meta_info(meta_infos: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge the meta_info of concatenated DataProtos.

    * ``metrics`` (a dict, or a list of dicts, per worker) are collected and flattened into one dict
      of lists: ``[{"loss": 1}, {"loss": 2}]`` → ``{"loss": [1, 2]}``.
    * ``timing`` dicts (seconds per stage, measured per worker) are averaged per key, as verl's
      workers do with ``reduce_timing`` before returning.
    * every other key must agree across parts.
    """
    merged: dict[str, Any] = {}
    all_metrics: list[dict[str, Any]] = []
    timings: list[dict[str, float]] = []
    for meta_info in meta_infos:
        for key, value in meta_info.items():
            if key == "metrics":
                if value is not None:
                    all_metrics.extend(value if isinstance(value, list) else [value])
            elif key == "timing" and isinstance(value, dict):
                timings.append(value)
            elif key in merged:
                require(
                    deep_equal(merged[key], value),
                    f"concat: conflicting values for meta_info key '{key}': {merged[key]!r} vs {value!r}",
                )
            else:
                merged[key] = value
    if all_metrics:
        merged["metrics"] = list_of_dict_to_dict_of_list(all_metrics)
    if timings:
        merged["timing"] = _mean_timing(timings)
    return merged
