"""How a DataProto leaves the process: the pickling hooks' encoding of the tensor batch, and files.

* Ray and ``pickle`` call ``DataProto.__getstate__``, which stores ``serialize_tensordict(batch)``:
  by default the ``torch.save`` bytes of the consolidated TensorDict (verl's format, one contiguous
  write); with env ``VERL_DATAPROTO_SERIALIZATION_METHOD=numpy``, ``(batch_size, device,
  {key: (dtype, shape, raw bytes)})``.
* ``save_to_disk`` / ``load_from_disk`` pickle the whole DataProto, as verl does. Loading a pickle
  runs code from the file: only load files this program wrote.
"""

from __future__ import annotations

import io
import os
import pickle
from typing import Any

import torch
from tensordict import TensorDict

from hybridrl.protocol.rows import tensor_items

__all__ = ["deserialize_tensordict", "load_from_disk", "save_to_disk", "serialize_tensordict"]

# verl's env switch for the numpy-based batch serialization (default: torch.save bytes).
_SERIALIZATION_ENV = "VERL_DATAPROTO_SERIALIZATION_METHOD"

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


def save_to_disk(data: Any, filepath: str) -> None:
    """Pickle ``data`` (a DataProto: its ``__getstate__`` encodes the batch) to ``filepath``."""
    with open(filepath, "wb") as f:
        pickle.dump(data, f)


def load_from_disk(filepath: str) -> Any:
    """Unpickle the object ``save_to_disk`` wrote to ``filepath`` (trusted files only)."""
    with open(filepath, "rb") as f:
        return pickle.load(f)
