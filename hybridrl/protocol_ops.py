"""Pure helpers behind :mod:`hybridrl.protocol`: unions with equality checks, meta-info merging,
auto-padding config and (de)serialization of a TensorDict.

Everything public here is re-exported from ``hybridrl.protocol`` (verl keeps them in ``verl/protocol.py``).
Failed checks raise ``AssertionError`` like verl's ``assert`` statements, but they are raised
explicitly so they survive ``python -O`` and always name the offending key.
"""

from __future__ import annotations

import io
import math
import os
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict

__all__ = [
    "require_batch",
    "tensor_items",
    "chunk_sizes",
    "common_batch_size",
    "DataProtoConfig",
    "deserialize_tensordict",
    "list_of_dict_to_dict_of_list",
    "merge_meta_info",
    "serialize_tensordict",
    "union_numpy_dict",
    "union_tensor_dict",
    "union_two_dict",
]

# Env vars that switch auto padding on for every DataProto (verl's name, then hybridrl's).
_AUTO_PADDING_ENVS = ("VERL_AUTO_PADDING", "HYBRIDRL_AUTO_PADDING")
# verl's env switch for the numpy-based batch serialization (default: torch.save bytes).
_SERIALIZATION_ENV = "VERL_DATAPROTO_SERIALIZATION_METHOD"


def require(condition: bool, message: str) -> None:
    """``assert`` that survives ``python -O`` (verl raises AssertionError for these checks)."""
    if not condition:
        raise AssertionError(message)


# ---------------------------------------------------------------------------
# Auto padding configuration
# ---------------------------------------------------------------------------


class _DataProtoConfigMeta(type):
    _config: dict[str, bool] = {}
    auto_padding_key = "_verl_auto_padding"

    @property
    def auto_padding(cls) -> bool:
        enabled_by_env = any(os.getenv(name, "FALSE").upper() in ("TRUE", "1") for name in _AUTO_PADDING_ENVS)
        return enabled_by_env or cls._config.get(cls.auto_padding_key, False)

    @auto_padding.setter
    def auto_padding(cls, enabled: bool) -> None:
        require(isinstance(enabled, bool), f"auto_padding must be a bool, got {enabled!r} ({type(enabled).__name__})")
        cls._config[cls.auto_padding_key] = enabled


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """Process-wide switch: ``DataProtoConfig.auto_padding = True`` lets ``chunk`` split unevenly.

    Also enabled by env ``VERL_AUTO_PADDING`` / ``HYBRIDRL_AUTO_PADDING`` = ``1``/``true``, or per
    DataProto by the meta key ``_verl_auto_padding``.
    """


# ---------------------------------------------------------------------------
# Row helpers
# ---------------------------------------------------------------------------


def tensor_items(batch: TensorDict) -> list[tuple[str, torch.Tensor]]:
    """``batch.items()`` typed as plain tensors (a DataProto batch holds no nested TensorDicts)."""
    return [(key, cast(torch.Tensor, value)) for key, value in batch.items()]


def require_batch(batch: TensorDict | None, operation: str) -> TensorDict:
    """``batch`` itself, or an AssertionError naming ``operation`` if the DataProto has no tensor batch."""
    if batch is None:
        raise AssertionError(f"{operation}: this DataProto has no tensor batch (batch is None)")
    return batch


def check_rows(batch: TensorDict | None, non_tensor_batch: dict[str, Any]) -> None:
    """DataProto invariant: one batch dim; non-tensor values are ndarrays of the batch's length."""
    if batch is not None:
        require(len(batch.batch_size) == 1, f"only num_batch_dims=1 is supported, got {batch.batch_size}")
    batch_size = batch.batch_size[0] if batch is not None else None
    for key, val in non_tensor_batch.items():
        require(
            isinstance(val, np.ndarray),
            f"non_tensor_batch['{key}'] must be a numpy array with dtype=object, got {type(val).__name__}",
        )
        if batch_size is not None:
            require(
                val.shape[0] == batch_size,
                f"non_tensor_batch key '{key}' has length {val.shape[0]}, but the batch size is {batch_size}",
            )


def normalize_row_index(idxs: list[Any] | np.ndarray | torch.Tensor) -> tuple[torch.Tensor, np.ndarray, int]:
    """Integer indices or a bool mask as (torch index, numpy index, number of selected rows)."""
    if isinstance(idxs, list):
        idxs = torch.tensor(idxs)
        if idxs.dtype != torch.bool:
            idxs = idxs.to(torch.int64)
    idxs_torch = torch.from_numpy(idxs) if isinstance(idxs, np.ndarray) else idxs
    idxs_np = idxs_torch.detach().cpu().numpy()
    size = int(idxs_np.sum()) if idxs_np.dtype == bool else int(idxs_np.shape[0])
    return idxs_torch, idxs_np, size


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
            f"Not all tensors have the same batch size with batch_dims={num_batch_dims}: "
            f"'{pivot_key}' has {list(batch_size)}, '{key}' has {list(current)}",
        )
    return batch_size


def chunk_sizes(num_rows: int, chunks: int) -> list[int]:
    """Row counts of ``chunks`` parts, as ``torch.chunk``: ``ceil(num_rows / chunks)`` each, the rest last.

    ``torch.chunk`` may return fewer parts (5 rows in 4 → 2, 2, 1); the missing parts are empty here,
    so the result always has ``chunks`` entries: ``[2, 2, 1, 0]``.
    """
    require(chunks > 0, f"chunks must be positive, got {chunks}")
    per_chunk = -(-num_rows // chunks)
    sizes = [min(per_chunk, max(num_rows - i * per_chunk, 0)) for i in range(chunks)]
    return sizes


def tile_rows(value: Any, times: int) -> Any:
    """Tile the rows of a tensor or array: ``[a, b]`` → ``[a, b, a, b]`` for ``times=2``."""
    reps = (times,) + (1,) * (value.ndim - 1)
    return value.repeat(*reps) if isinstance(value, torch.Tensor) else np.tile(value, reps)


def unfold_or_repeat_rows(value: Any, n_split: int, split: bool) -> Any:
    """``[B, n·L, ...]`` → ``[B·n, L, ...]`` if ``split``, else repeat each row ``n_split`` times."""
    if not split:
        if isinstance(value, torch.Tensor):
            return value.repeat_interleave(n_split, dim=0)
        return np.repeat(value, n_split, axis=0)
    require(value.shape[1] % n_split == 0, f"dim 1 of size {value.shape[1]} is not divisible by n_split={n_split}")
    return value.reshape(value.shape[0] * n_split, value.shape[1] // n_split, *value.shape[2:])


# ---------------------------------------------------------------------------
# Unions with equality checks
# ---------------------------------------------------------------------------


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


def _deep_equal(a: Any, b: Any) -> bool:
    """Equality that treats NaN == NaN, recurses into object arrays/lists/dicts and compares tensors."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype != object:
            return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        return all(_deep_equal(x, y) for x, y in zip(a.flat, b.flat))
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_deep_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_deep_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def union_numpy_dict(tensor_dict1: dict[str, np.ndarray], tensor_dict2: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add the arrays of ``tensor_dict2`` to ``tensor_dict1`` (in place); shared keys must be deep-equal."""
    for key, val in tensor_dict2.items():
        if key in tensor_dict1:
            require(isinstance(val, np.ndarray), f"union: non_tensor_batch['{key}'] must be a numpy array")
            require(
                _deep_equal(tensor_dict1[key], val),
                f"union: conflicting values for non_tensor_batch key '{key}' "
                f"({_describe(tensor_dict1[key])} vs {_describe(val)})",
            )
        tensor_dict1[key] = val
    return tensor_dict1


def union_two_dict(dict1: dict[str, Any], dict2: dict[str, Any]) -> dict[str, Any]:
    """Merge ``dict2`` into ``dict1`` (in place); shared keys must be equal (meta_info union)."""
    for key, val in dict2.items():
        if key in dict1:
            require(
                _deep_equal(dict1[key], val),
                f"union: conflicting values for meta_info key '{key}': {dict1[key]!r} vs {val!r}",
            )
        dict1[key] = val
    return dict1


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
                    _deep_equal(merged[key], value),
                    f"concat: conflicting values for meta_info key '{key}': {merged[key]!r} vs {value!r}",
                )
            else:
                merged[key] = value
    if all_metrics:
        merged["metrics"] = list_of_dict_to_dict_of_list(all_metrics)
    if timings:
        merged["timing"] = _mean_timing(timings)
    return merged


# ---------------------------------------------------------------------------
# Serialization of the tensor batch
# ---------------------------------------------------------------------------

EncodedTensor = tuple[str, tuple[int, ...], bytes]


def _encode_tensor(tensor: torch.Tensor) -> EncodedTensor:
    raw = tensor.detach().cpu().contiguous().flatten().view(torch.uint8).numpy().tobytes()
    return str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), raw


def _decode_tensor(encoded: EncodedTensor) -> torch.Tensor:
    dtype_name, shape, raw = encoded
    dtype = getattr(torch, dtype_name)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).view(shape)


def serialize_tensordict(batch: TensorDict | None) -> Any:
    """Encode the batch for pickling.

    Default: ``torch.save`` of the consolidated TensorDict into bytes (verl's format). With env
    ``VERL_DATAPROTO_SERIALIZATION_METHOD=numpy``: ``(batch_size, device, {key: (dtype, shape, bytes)})``.
    """
    if batch is None:
        return None
    if os.getenv(_SERIALIZATION_ENV) == "numpy":
        items = {key: _encode_tensor(value) for key, value in tensor_items(batch)}
        device = str(batch.device) if batch.device is not None else None
        return tuple(batch.batch_size), device, items
    if len(batch.keys()) > 0:
        # one contiguous storage → one write; much faster than saving tensor by tensor.
        batch = batch.contiguous().consolidate()
    buffer = io.BytesIO()
    torch.save(batch, buffer)
    return buffer.getvalue()


def deserialize_tensordict(encoded: Any) -> TensorDict | None:
    """Inverse of :func:`serialize_tensordict` (tensors land on CPU when CUDA is unavailable)."""
    if encoded is None:
        return None
    if isinstance(encoded, tuple):
        batch_size, device, items = encoded
        return TensorDict(
            {key: _decode_tensor(value) for key, value in items.items()}, batch_size=batch_size, device=device
        )
    map_location = None if torch.cuda.is_available() else "cpu"
    batch: TensorDict = torch.load(io.BytesIO(encoded), weights_only=False, map_location=map_location)
    return batch
