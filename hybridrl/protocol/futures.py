"""DataProtos that cross processes: ``DataProtoFuture`` (a worker-group output not yet fetched) and
``all_gather_data_proto`` (rows gathered across a ``torch.distributed`` process group).

Ray is imported only when a future is resolved (:func:`_resolve`), so ``import hybridrl.protocol``
stays cheap and Ray-free for code that never touches a worker group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
import torch.distributed
from tensordict import TensorDict

from hybridrl.protocol.data_proto import DataProto

__all__ = ["DataProtoFuture", "all_gather_data_proto"]

# ---------------------------------------------------------------------------
# Futures
# ---------------------------------------------------------------------------


def _chunk_selector(data: DataProto, index: int, chunks: int) -> DataProto:
    return data.chunk(chunks=chunks)[index]


def _resolve(futures: list[Any]) -> list[Any]:
    """``ray.get`` the Ray object refs (one batched call); other values pass through unchanged."""
    import ray  # lazy, not to dodge a cycle: importing Ray costs ~1 s and most users of DataProto never need it

    is_ref = [isinstance(item, ray.ObjectRef) for item in futures]
    fetched = iter(ray.get([item for item, ref in zip(futures, is_ref) if ref])) if any(is_ref) else iter(())
    return [next(fetched) if ref else item for item, ref in zip(futures, is_ref)]


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
        return DataProtoFuture(collect_fn=DataProto.concat, futures=data)

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
# All-gather across a process group
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
