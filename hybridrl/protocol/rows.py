"""Row arithmetic shared by the tensor part (``torch.Tensor [B, ...]``) and the non-tensor part
(``np.ndarray [B, ...]``) of a DataProto: index normalization, chunk sizes, tiling and column unfolding.

These functions take tensors and arrays, never a DataProto, so :mod:`hybridrl.protocol.data_proto`
can build its row operations on them.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict

from hybridrl.protocol.checks import require

__all__ = ["chunk_sizes", "normalize_row_index", "tensor_items", "tile_rows", "unfold_or_repeat_rows"]


def tensor_items(batch: TensorDict) -> list[tuple[str, torch.Tensor]]:
    """``batch.items()`` typed as plain tensors (a DataProto batch holds no nested TensorDicts)."""
    return [(key, cast(torch.Tensor, value)) for key, value in batch.items()]


def normalize_row_index(idxs: list[Any] | np.ndarray | torch.Tensor) -> tuple[torch.Tensor, np.ndarray, int]:
    """Integer indices or a bool mask ``[B]`` as (torch index, numpy index, number of selected rows)."""
    if isinstance(idxs, list):
        idxs = torch.tensor(idxs)
        if idxs.dtype != torch.bool:
            idxs = idxs.to(torch.int64)
    idxs_torch = torch.from_numpy(idxs) if isinstance(idxs, np.ndarray) else idxs
    idxs_np = idxs_torch.detach().cpu().numpy()
    size = int(idxs_np.sum()) if idxs_np.dtype == bool else int(idxs_np.shape[0])
    return idxs_torch, idxs_np, size


def chunk_sizes(num_rows: int, chunks: int, spread_evenly: bool = False) -> list[int]:
    """Row counts of ``chunks`` parts; always ``chunks`` entries (some may be 0).

    * default, ``torch.chunk``'s rule (verl's, for a DataProto with a tensor batch):
      ``ceil(num_rows / chunks)`` rows each, the remainder last. ``torch.chunk`` may return fewer
      parts (5 rows in 4 → 2, 2, 1); the missing parts are empty here: ``[2, 2, 1, 0]``.
    * ``spread_evenly`` — ``np.array_split``'s rule (verl's for a DataProto without a tensor batch):
      the first ``num_rows % chunks`` parts get one extra row: 5 rows in 4 → ``[2, 1, 1, 1]``.
    """
    require(chunks > 0, f"chunks must be positive, got {chunks}")
    if spread_evenly:
        base, extra = divmod(num_rows, chunks)
        return [base + 1] * extra + [base] * (chunks - extra)
    per_chunk = -(-num_rows // chunks)
    return [min(per_chunk, max(num_rows - i * per_chunk, 0)) for i in range(chunks)]


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
