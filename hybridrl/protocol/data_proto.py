"""DataProto: the batch every worker call takes and returns (verl v0.5 ``verl/protocol.py`` API).

A ``DataProto`` holds ``B`` rows in three parts:

* ``batch``: a ``TensorDict`` with batch size ``[B]`` (``input_ids [B, P+R]``, ``responses [B, R]``, ...);
* ``non_tensor_batch``: ``{key: np.ndarray(dtype=object) of length B}`` (``uid``, ``data_source``, ...);
* ``meta_info``: a plain dict shared by all rows (``global_steps``, ``metrics``, ...).

The canonical keys of a PPO step, their shapes and the stage that adds each one are tabled in
:mod:`hybridrl.protocol.keys`. Row operations (index, slice, chunk, concat, repeat, reorder) apply to
``batch`` and ``non_tensor_batch`` together and carry ``meta_info`` along. ``None`` for a part means
empty, as in verl: ``DataProto(batch=None, non_tensor_batch=None)`` has 0 rows.

The class builds on the package's leaf modules; padding, folding and futures import it, never the reverse.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader

from hybridrl.protocol import tensordict_conversion
from hybridrl.protocol.auto_padding import DataProtoConfig
from hybridrl.protocol.checks import (
    as_key_list,
    check_rows,
    common_batch_size,
    require,
    require_batch,
    require_batch_keys,
)
from hybridrl.protocol.merge import (
    list_of_dict_to_dict_of_list,
    merge_meta_info,
    union_numpy_dict,
    union_tensor_dict,
    union_two_dict,
)
from hybridrl.protocol.rows import chunk_sizes, normalize_row_index, tensor_items, tile_rows, unfold_or_repeat_rows
from hybridrl.protocol.serialization import deserialize_tensordict, load_from_disk, save_to_disk, serialize_tensordict

__all__ = ["DataProto", "DataProtoItem", "Index", "collate_fn"]

Index = int | np.integer | slice | list[Any] | np.ndarray | torch.Tensor


@dataclass
class DataProtoItem:
    """One row of a DataProto: ``batch`` has an empty batch size, ``non_tensor_batch`` holds scalars."""

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, Any] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataProto:
    """Rows of tensors (``batch``), per-row Python objects (``non_tensor_batch``) and shared ``meta_info``.

    ``non_tensor_batch=None`` and ``meta_info=None`` are read as empty dicts (verl accepts both).
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.non_tensor_batch is None:
            self.non_tensor_batch = {}
        if self.meta_info is None:
            self.meta_info = {}
        self.check_consistency()

    # ------------------------------------------------------------------ basics

    def check_consistency(self) -> None:
        """One batch dim; every non-tensor value is an ndarray whose length equals the batch size."""
        check_rows(self.batch, self.non_tensor_batch)

    def __len__(self) -> int:
        if self.batch is not None:
            return int(self.batch.batch_size[0])
        if self.non_tensor_batch:
            return int(next(iter(self.non_tensor_batch.values())).shape[0])
        return 0

    def __getitem__(self, item: Index) -> Any:
        """``dp[int]`` → DataProtoItem; ``dp[slice]`` → slice; ``dp[list | ndarray | tensor]`` → select_idxs."""
        if isinstance(item, slice):
            return self.slice(item.start, item.stop, item.step)
        if isinstance(item, list | np.ndarray | torch.Tensor):
            return self.select_idxs(item)
        if isinstance(item, int | np.integer):
            row_batch = self.batch[int(item)] if self.batch is not None else None
            row_non_tensor = {key: val[item] for key, val in self.non_tensor_batch.items()}
            return DataProtoItem(batch=row_batch, non_tensor_batch=row_non_tensor, meta_info=self.meta_info)
        raise TypeError(f"Indexing DataProto with {type(item).__name__} is not supported")

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_single_dict(
        cls,
        data: dict[str, torch.Tensor | np.ndarray],
        meta_info: dict[str, Any] | None = None,
        auto_padding: bool = False,
    ) -> DataProto:
        """Split one dict into tensors (→ ``batch``) and ndarrays (→ ``non_tensor_batch``)."""
        tensors: dict[str, torch.Tensor] = {}
        non_tensors: dict[str, Any] = {}
        for key, val in data.items():
            if isinstance(val, torch.Tensor):
                tensors[key] = val
            elif isinstance(val, np.ndarray):
                non_tensors[key] = val
            else:
                raise ValueError(f"Unsupported type in data for key '{key}': {type(val).__name__}")
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info, auto_padding=auto_padding)

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict[str, Any] | None = None,
        meta_info: dict[str, Any] | None = None,
        num_batch_dims: int = 1,
        auto_padding: bool = False,
    ) -> DataProto:
        """Build from tensors sharing their first ``num_batch_dims`` dims; lists become object arrays."""
        require(num_batch_dims > 0, "num_batch_dims must be greater than zero")
        if non_tensors is not None:
            require(num_batch_dims == 1, "only support num_batch_dims=1 when non_tensors is not None")
        tensors = tensors or {}
        meta_info = {} if meta_info is None else meta_info
        non_tensors = {} if non_tensors is None else non_tensors
        batch_size = common_batch_size(tensors, num_batch_dims)
        for key, val in non_tensors.items():
            if not isinstance(val, np.ndarray):
                non_tensors[key] = np.array(val, dtype=object)
        batch = TensorDict(source=tensors, batch_size=batch_size) if tensors else None
        if auto_padding:
            meta_info[DataProtoConfig.auto_padding_key] = True
        return cls(batch=batch, non_tensor_batch=non_tensors, meta_info=meta_info)

    # ------------------------------------------------------------------ keys

    def to(self, device: str | torch.device) -> DataProto:
        """Move ``batch`` to ``device`` in place and return self."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def select(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """A DataProto with only the given keys (``None`` keeps all); tensors are shared, not copied."""
        sub_batch = self.batch
        if batch_keys is not None:
            batch = require_batch(self.batch, f"select(batch_keys={list(batch_keys)})")
            require_batch_keys(batch, batch_keys, "select")
            sub_batch = batch.select(*batch_keys)
        non_tensor = self.non_tensor_batch
        if non_tensor_batch_keys is not None:
            non_tensor = {k: v for k, v in self.non_tensor_batch.items() if k in non_tensor_batch_keys}
        meta_info = self.meta_info
        if meta_info_keys is not None:
            meta_info = {k: v for k, v in self.meta_info.items() if k in meta_info_keys}
        if deepcopy:
            non_tensor, meta_info = copy.deepcopy(non_tensor), copy.deepcopy(meta_info)
        return type(self)(batch=sub_batch, non_tensor_batch=non_tensor, meta_info=meta_info)

    def pop(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
    ) -> DataProto:
        """Remove the given keys from self and return them as a new DataProto."""
        tensors: dict[str, torch.Tensor] = {}
        non_tensors: dict[str, Any] = {}
        meta_info: dict[str, Any] = {}
        for key in batch_keys or []:
            batch = require_batch(self.batch, f"pop(batch_keys=['{key}'])")
            require_batch_keys(batch, [key], "pop")
            tensors[key] = cast(torch.Tensor, batch.pop(key))
        for key in non_tensor_batch_keys or []:
            require(key in self.non_tensor_batch, f"pop: non_tensor_batch key '{key}' not found")
            non_tensors[key] = self.non_tensor_batch.pop(key)
        for key in meta_info_keys or []:
            require(key in self.meta_info, f"pop: meta_info key '{key}' not found")
            meta_info[key] = self.meta_info.pop(key)
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info)

    def rename(self, old_keys: str | list[str] | None = None, new_keys: str | list[str] | None = None) -> DataProto:
        """Rename ``batch`` keys in place (non-tensor and meta keys are untouched); returns self."""
        old, new = as_key_list(old_keys), as_key_list(new_keys)
        if len(old) != len(new):
            raise ValueError(f"new_keys and old_keys must have the same length, got {len(new)} and {len(old)}")
        for old_key, new_key in zip(old, new):
            batch = require_batch(self.batch, "rename")
            require_batch_keys(batch, [old_key], "rename")
            batch.rename_key_(old_key, new_key)
        return self

    def union(self, other: DataProto) -> DataProto:
        """Merge ``other`` into self (in place); keys present in both must hold equal values."""
        if self.batch is None or other.batch is None:
            self.batch = self.batch if other.batch is None else other.batch
        else:
            self.batch = union_tensor_dict(self.batch, other.batch)
        self.non_tensor_batch = union_numpy_dict(self.non_tensor_batch, other.non_tensor_batch)
        self.meta_info = union_two_dict(self.meta_info, other.meta_info)
        self.check_consistency()
        return self

    # ------------------------------------------------------------------ rows

    def _map_rows(
        self, num_rows: int, tensor_fn: Callable[[str, torch.Tensor], torch.Tensor], array_fn: Callable[[str, Any], Any]
    ) -> DataProto:
        """A new DataProto of ``num_rows`` rows from per-key row transforms; meta_info is shared."""
        batch = None
        if self.batch is not None:
            source = {key: tensor_fn(key, tensor) for key, tensor in tensor_items(self.batch)}
            batch = TensorDict(source=source, batch_size=(num_rows,), device=self.batch.device)
        non_tensor = {key: array_fn(key, val) for key, val in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)

    def select_idxs(self, idxs: list[Any] | np.ndarray | torch.Tensor) -> DataProto:
        """Rows at integer indices, or where a bool mask is True, as a new DataProto."""
        idxs_torch, idxs_np, size = normalize_row_index(idxs)
        return self._map_rows(size, lambda _, t: t[idxs_torch.to(t.device)], lambda _, v: v[idxs_np])

    def slice(self, start: int | None = None, end: int | None = None, step: int | None = None) -> DataProto:
        """Rows ``[start:end:step]`` as a new DataProto (tensors are views)."""
        rows = slice(start, end, step)
        batch = self.batch[rows] if self.batch is not None else None
        non_tensor = {key: val[rows] for key, val in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)

    def reorder(self, indices: torch.Tensor) -> None:
        """Permute rows in place: row ``i`` becomes old row ``indices[i]``."""
        indices_np = indices.detach().cpu().numpy()
        if self.batch is not None:
            self.batch = self.batch[indices]
        self.non_tensor_batch = {key: val[indices_np] for key, val in self.non_tensor_batch.items()}

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Repeat every row: interleaved ``[a, a, b, b]`` (used for ``rollout.n``) or tiled ``[a, b, a, b]``."""
        num_rows = len(self) * repeat_times
        if interleave:
            return self._map_rows(
                num_rows,
                lambda _, t: t.repeat_interleave(repeat_times, dim=0),
                lambda _, v: np.repeat(v, repeat_times, 0),
            )
        return self._map_rows(
            num_rows, lambda _, t: tile_rows(t, repeat_times), lambda _, v: tile_rows(v, repeat_times)
        )

    def sample_level_repeat(self, repeat_times: Sequence[int] | np.ndarray | torch.Tensor) -> DataProto:
        """Repeat row ``i`` ``repeat_times[i]`` times (interleaved)."""
        counts = torch.as_tensor(list(repeat_times) if isinstance(repeat_times, tuple) else repeat_times).cpu()
        require(counts.dim() == 1 and counts.numel() == len(self), f"repeat_times must be 1-D of length {len(self)}")
        return self._map_rows(
            int(counts.sum()),
            lambda _, t: t.repeat_interleave(counts.to(t.device), dim=0),
            lambda _, v: np.repeat(v, counts.numpy(), axis=0),
        )

    def unfold_column_chunks(self, n_split: int, split_keys: Sequence[str] | None = None) -> DataProto:
        """Split dim 1 of ``split_keys`` into ``n_split`` pieces moved into the batch dim; repeat other keys.

        ``[B, n·L]`` → ``[B·n, L]`` for split keys; other keys ``[B, ...]`` → ``[B·n, ...]`` (interleaved).
        """
        split = set(split_keys or [])

        def unfold(key: str, value: Any) -> Any:
            return unfold_or_repeat_rows(value, n_split, key in split)

        return self._map_rows(len(self) * n_split, unfold, unfold)

    # ------------------------------------------------------------------ split / join

    def is_padding_enabled(self) -> bool:
        """Per-DataProto meta key ``_verl_auto_padding`` or the global ``DataProtoConfig.auto_padding``."""
        return bool(self.meta_info.get(DataProtoConfig.auto_padding_key, False)) or DataProtoConfig.auto_padding

    def padding(self, padding_size: int, padding_candidate: str = "") -> None:
        """Append ``padding_size`` copies of the last row (or the first if ``"first"``), in place."""
        if padding_size == 0:
            return
        candidate = self.select_idxs([0 if padding_candidate == "first" else len(self) - 1])
        padded = DataProto.concat([self, candidate.repeat(padding_size)])
        self.batch, self.non_tensor_batch = padded.batch, padded.non_tensor_batch

    def chunk(self, chunks: int) -> list[DataProto]:
        """Split rows into ``chunks`` parts (equal unless padding is enabled); meta_info goes to each.

        Uneven sizes follow verl: ``torch.chunk``'s with a tensor batch (5 rows in 4 → 2, 2, 1, 0),
        ``np.array_split``'s without one (5 rows in 4 → 2, 1, 1, 1); see :func:`rows.chunk_sizes`.
        """
        if not self.is_padding_enabled():
            require(
                len(self) % chunks == 0,
                f"only support equal chunk. Got size of DataProto {len(self)} and chunk {chunks}; "
                "enable DataProtoConfig.auto_padding or pad with pad_dataproto_to_divisor",
            )
        offsets = np.cumsum([0, *chunk_sizes(len(self), chunks, spread_evenly=self.batch is None)])
        return [self.slice(int(offsets[i]), int(offsets[i + 1])) for i in range(chunks)]

    def split(self, split_size: int) -> list[DataProto]:
        """Consecutive parts of ``split_size`` rows (the last may be shorter)."""
        return [self[i : i + split_size] for i in range(0, len(self), split_size)]

    @staticmethod
    def concat(data: list[DataProto]) -> DataProto:
        """Concatenate rows; meta_info is merged (non-metric keys must agree, ``metrics`` → dict of lists)."""
        require(len(data) > 0, "concat: got an empty list of DataProto")
        batches = [d.batch for d in data]
        batch = cast(TensorDict, torch.cat(batches, dim=0)) if batches[0] is not None else None  # type: ignore[arg-type]
        non_tensor_lists = list_of_dict_to_dict_of_list([d.non_tensor_batch for d in data])
        non_tensor = {key: np.concatenate(val, axis=0) for key, val in non_tensor_lists.items()}
        meta_info = merge_meta_info([d.meta_info for d in data])
        return type(data[0])(batch=batch, non_tensor_batch=non_tensor, meta_info=meta_info)

    def make_iterator(
        self,
        mini_batch_size: int,
        epochs: int,
        seed: int | None = None,
        dataloader_kwargs: dict[str, Any] | None = None,
    ) -> Iterator[DataProto]:
        """Yield ``epochs * len(self) // mini_batch_size`` mini-batches through a torch DataLoader.

        Pass ``dataloader_kwargs={"shuffle": True}`` to shuffle; ``seed`` makes the order reproducible.
        """
        require(len(self) % mini_batch_size == 0, f"{len(self)} % {mini_batch_size} != 0")
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        loader: DataLoader[DataProtoItem] = DataLoader(
            dataset=self,  # type: ignore[arg-type]
            batch_size=mini_batch_size,
            collate_fn=collate_fn,
            generator=generator,
            **(dataloader_kwargs or {}),
        )

        def get_data() -> Iterator[DataProto]:
            for _ in range(epochs):
                for mini_batch in loader:
                    mini_batch.meta_info = self.meta_info
                    yield mini_batch

        return iter(get_data())

    # ------------------------------------------------------------------ serialization

    def __getstate__(self) -> tuple[Any, dict[str, np.ndarray], dict[str, Any]]:
        """``(encoded batch, non_tensor_batch, meta_info)``; see :mod:`hybridrl.protocol.serialization`."""
        return serialize_tensordict(self.batch), self.non_tensor_batch, self.meta_info

    def __setstate__(self, state: tuple[Any, dict[str, np.ndarray], dict[str, Any]]) -> None:
        encoded_batch, self.non_tensor_batch, self.meta_info = state
        self.batch = deserialize_tensordict(encoded_batch)

    def to_tensordict(self) -> TensorDict:
        """The DataProto as one TensorDict (``protocol/tensordict_conversion.py`` gives the layout)."""
        return tensordict_conversion.to_tensordict(self.batch, self.non_tensor_batch, self.meta_info, len(self))

    @classmethod
    def from_tensordict(
        cls, tensor_dict: TensorDict, meta_info: dict | None = None, num_batch_dims: int = 1
    ) -> DataProto:
        """A DataProto from a TensorDict laid out as :meth:`to_tensordict` makes it (``num_batch_dims``: verl's
        argument; a DataProto has one batch dim, so only 1 builds one)."""
        batch, non_tensor_batch, meta = tensordict_conversion.from_tensordict_parts(
            tensor_dict, meta_info, num_batch_dims
        )
        return cls(batch=batch, non_tensor_batch=non_tensor_batch, meta_info=meta)

    def save_to_disk(self, filepath: str) -> None:
        """Write to ``filepath`` as safetensors + JSON (no pickle, unlike verl); see serialization.py."""
        save_to_disk(self, filepath)

    @staticmethod
    def load_from_disk(filepath: str, allow_pickle: bool = False) -> DataProto:
        """Read :meth:`save_to_disk`'s file (no code runs); ``allow_pickle``: an old pickle you wrote yourself."""
        parts = load_from_disk(filepath, allow_pickle=allow_pickle)
        return parts if isinstance(parts, DataProto) else DataProto(*parts)  # (batch, non_tensor_batch, meta_info)

    def print_size(self, prefix: str = "") -> None:
        """Print the GB held by ``batch`` and by ``non_tensor_batch``."""
        tensors = tensor_items(self.batch) if self.batch is not None else []
        tensor_gb = sum(t.element_size() * t.numel() for _, t in tensors) / 1024**3
        numpy_gb = sum(arr.nbytes for arr in self.non_tensor_batch.values()) / 1024**3
        message = f"Size of tensordict: {tensor_gb} GB, size of non_tensor_batch: {numpy_gb} GB"
        print(f"{prefix}, {message}" if prefix else message)


def collate_fn(items: list[DataProtoItem]) -> DataProto:
    """DataLoader collate: stack ``DataProtoItem`` rows back into a DataProto (no meta_info)."""
    batch = cast(TensorDict, torch.stack([item.batch for item in items])).contiguous()  # type: ignore[misc]
    columns = list_of_dict_to_dict_of_list([item.non_tensor_batch for item in items])
    return DataProto(batch=batch, non_tensor_batch={key: np.array(val, dtype=object) for key, val in columns.items()})
