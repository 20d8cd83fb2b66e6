"""Functions around :class:`hybridrl.protocol.DataProto`: padding to a divisor, batch-dim folding,
``DataProtoFuture`` and the distributed all-gather. All are re-exported from ``hybridrl.protocol``.

This module never imports ``hybridrl.protocol`` at import time (it is imported by it); functions that
need the class take it from their argument or import it lazily.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
import torch.distributed
from tensordict import TensorDict

from hybridrl.protocol_ops import list_of_dict_to_dict_of_list, require

if TYPE_CHECKING:
    from hybridrl.protocol import DataProto, DataProtoItem

__all__ = [
    "DataProtoFuture",
    "all_gather_data_proto",
    "collate_fn",
    "fold_batch_dim",
    "pad_dataproto_to_divisor",
    "unfold_batch_dim",
    "unpad_dataproto",
]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# Padding to a divisor (used around validation generation and auto-padded dispatch)
# ---------------------------------------------------------------------------


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Append leading rows (cycling from row 0) until ``len(data) % size_divisor == 0``.

    Returns:
        ``(padded, pad_size)``; ``unpad_dataproto(padded, pad_size)`` restores ``data``.
    """
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


def collate_fn(items: list[DataProtoItem]) -> DataProto:
    """DataLoader collate: stack ``DataProtoItem`` rows back into a DataProto (no meta_info)."""
    from hybridrl.protocol import DataProto

    batch = cast(TensorDict, torch.stack([item.batch for item in items])).contiguous()  # type: ignore[misc]
    non_tensor = list_of_dict_to_dict_of_list([item.non_tensor_batch for item in items])
    return DataProto(
        batch=batch, non_tensor_batch={key: np.array(val, dtype=object) for key, val in non_tensor.items()}
    )


# ---------------------------------------------------------------------------
# Batch-dim folding
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Futures
# ---------------------------------------------------------------------------


def _chunk_selector(data: DataProto, index: int, chunks: int) -> DataProto:
    return data.chunk(chunks=chunks)[index]


def _resolve(futures: list[Any]) -> list[Any]:
    """``ray.get`` the Ray object refs (one batched call); other values pass through unchanged."""
    import ray  # lazy: hybridrl.protocol must not import ray at module import time

    is_ref = [isinstance(item, ray.ObjectRef) for item in futures]
    fetched = iter(ray.get([item for item, ref in zip(futures, is_ref) if ref])) if any(is_ref) else iter(())
    return [next(fetched) if ref else item for item, ref in zip(futures, is_ref)]


def _default_collect(parts: list[Any]) -> Any:
    from hybridrl.protocol import DataProto

    return DataProto.concat(parts)


@dataclass
class DataProtoFuture:
    """A DataProto that does not exist on the driver yet: the output refs of a non-blocking WG call.

    ``collect_fn`` reduces the fetched per-worker outputs (usually ``DataProto.concat``);
    ``dispatch_fn`` then selects this future's part (set by :meth:`chunk`). Pass it straight into
    another worker-group call; it is materialized worker-side with :meth:`get`.
    """

    collect_fn: Callable[[list[Any]], Any]
    futures: list[Any]
    dispatch_fn: Callable[[Any], Any] | None = None

    @staticmethod
    def concat(data: list[Any]) -> DataProtoFuture:
        """A future that concatenates the DataProtos behind ``data`` (Ray object refs)."""
        return DataProtoFuture(collect_fn=_default_collect, futures=data)

    def chunk(self, chunks: int) -> list[DataProtoFuture]:
        """``chunks`` lazy futures; the i-th yields ``collect(futures).chunk(chunks)[i]``."""
        return [
            DataProtoFuture(
                collect_fn=self.collect_fn,
                futures=self.futures,
                dispatch_fn=partial(_chunk_selector, index=i, chunks=chunks),
            )
            for i in range(chunks)
        ]

    def get(self) -> Any:
        """Fetch (``ray.get``), collect, then apply ``dispatch_fn`` if set."""
        output = self.collect_fn(_resolve(self.futures))
        if self.dispatch_fn is not None:
            output = self.dispatch_fn(output)
        return output


# ---------------------------------------------------------------------------
# Distributed
# ---------------------------------------------------------------------------


def _all_gather_tensordict(batch: TensorDict, group_size: int, group: Any) -> TensorDict:
    gathered = {}
    for key in sorted(batch.keys()):
        value = batch[key]
        parts = [torch.empty_like(value) for _ in range(group_size)]
        torch.distributed.all_gather(parts, value, group=group)
        gathered[key] = torch.cat(parts, dim=0)
    return TensorDict(source=gathered, batch_size=(batch.batch_size[0] * group_size,), device=batch.device)


def all_gather_data_proto(data: DataProto, process_group: Any) -> None:
    """All-gather rows across ``process_group`` in place (like ``torch.distributed.all_gather``).

    Tensors travel through ``all_gather`` (on the current CUDA device when the backend is NCCL);
    non-tensor arrays through ``all_gather_object``. Every rank must hold the same keys and row count.
    """
    group_size = torch.distributed.get_world_size(group=process_group)
    if data.batch is not None:
        prev_device = data.batch.device
        batch = data.batch.contiguous()
        if torch.distributed.get_backend(process_group) == "nccl":
            batch = batch.to(torch.device("cuda", torch.cuda.current_device()))
        gathered_batch = _all_gather_tensordict(batch, group_size, process_group)
        data.batch = gathered_batch.to(prev_device) if prev_device is not None else gathered_batch
    gathered: list[Any] = [None] * group_size
    torch.distributed.all_gather_object(gathered, data.non_tensor_batch, group=process_group)
    data.non_tensor_batch = {key: np.concatenate([part[key] for part in gathered]) for key in data.non_tensor_batch}
