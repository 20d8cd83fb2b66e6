"""How a DataProto leaves the process: the pickling hooks' encoding of the tensor batch, and files.

* Ray and ``pickle`` call ``DataProto.__getstate__``, which stores ``serialize_tensordict(batch)``:
  by default the ``torch.save`` bytes of the consolidated TensorDict (verl's format, one contiguous
  write); with env ``VERL_DATAPROTO_SERIALIZATION_METHOD=numpy``, ``(batch_size, device,
  {key: (dtype, shape, raw bytes)})``.
  The only input of :func:`deserialize_tensordict` is therefore what ``__setstate__`` receives: bytes
  that Ray's object transport (trusted: inside the cluster, see docs/security.md) or an explicit
  ``pickle.loads`` by the caller hands over. No hybridrl code reads those bytes from a file.
* ``save_to_disk`` / ``load_from_disk`` do NOT pickle (verl does): one safetensors file holding the
  tensors, with batch size, ``non_tensor_batch`` and ``meta_info`` as JSON in its header
  (:mod:`hybridrl.utils.safe_state`; object arrays of plain values are kept, anything needing pickle is
  refused on save). Loading runs no code from the file. A pickle written by an earlier hybridrl (or by
  verl) is refused unless ``allow_pickle=True`` is passed, for files the caller wrote itself.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
from typing import Any

import torch
from tensordict import TensorDict

from hybridrl.protocol.rows import tensor_items
from hybridrl.utils.safe_state import UnsafeStateError, load_single_file, save_single_file

logger = logging.getLogger(__name__)
_FILE_KIND = "hybridrl_dataproto"  # the safetensors metadata key holding the JSON part
_PICKLE_PROTO = b"\x80"  # first byte of a pickle (protocol >= 2)

__all__ = [
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "load_from_disk",
    "save_to_disk",
    "serialize_single_tensor",
    "serialize_tensordict",
]

# verl's env switch for the numpy-based batch serialization (default: torch.save bytes).
_SERIALIZATION_ENV = "VERL_DATAPROTO_SERIALIZATION_METHOD"

EncodedTensor = tuple[str, tuple[int, ...], bytes]


def serialize_single_tensor(tensor: torch.Tensor) -> EncodedTensor:
    """``(dtype name, shape, raw bytes)`` of a tensor (verl's numpy-path encoding of one tensor)."""
    raw = tensor.detach().cpu().contiguous().flatten().view(torch.uint8).numpy().tobytes()
    return str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), raw


def deserialize_single_tensor(encoded: EncodedTensor) -> torch.Tensor:
    """Inverse of :func:`serialize_single_tensor` (a CPU tensor over a copy of the bytes)."""
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
        items = {key: serialize_single_tensor(value) for key, value in tensor_items(batch)}
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
            {key: deserialize_single_tensor(value) for key, value in items.items()},
            batch_size=batch_size,
            device=device,
        )
    map_location = None if torch.cuda.is_available() else "cpu"
    # weights_only=False: a TensorDict is not on torch's allow-list. ``encoded`` comes from __setstate__,
    # i.e. from Ray's transport or the caller's own pickle.loads (which could run code anyway), never a file.
    batch: TensorDict = torch.load(io.BytesIO(encoded), weights_only=False, map_location=map_location)
    return batch


def save_to_disk(data: Any, filepath: str) -> None:
    """Write ``data`` (a DataProto) to ``filepath`` as safetensors + JSON metadata (no pickle).

    Raises:
        ValueError: a ``non_tensor_batch``/``meta_info`` value that only pickle could store (its place named).
    """
    batch = data.batch
    state = {
        "batch": None if batch is None else dict(tensor_items(batch)),
        "batch_size": None if batch is None else list(batch.batch_size),
        "non_tensor_batch": data.non_tensor_batch,
        "meta_info": data.meta_info,
    }
    try:
        save_single_file(state, filepath, _FILE_KIND)
    except UnsafeStateError as error:
        raise ValueError(
            f"DataProto.save_to_disk({filepath!r}): {error}. Convert that value to plain types "
            "(str, numbers, lists, dicts, numpy arrays) before saving"
        ) from error


def _looks_like_pickle(filepath: str) -> bool:
    with open(filepath, "rb") as f:
        return f.read(1) == _PICKLE_PROTO


def load_from_disk(filepath: str, allow_pickle: bool = False) -> Any:
    """``(batch TensorDict | None, non_tensor_batch, meta_info)`` from a file :func:`save_to_disk` wrote.

    Args:
        allow_pickle: also read a pickle written by an earlier hybridrl or verl (it can run any code:
            only for files you wrote yourself); returns the unpickled DataProto itself then.
    """
    try:
        parts = load_single_file(filepath, _FILE_KIND)
    except ValueError as error:
        if not _looks_like_pickle(filepath):
            raise
        if not allow_pickle:
            raise ValueError(
                f"{filepath} is a pickle (the format of earlier hybridrl and of verl's DataProto.save_to_disk); "
                "loading a pickle can run arbitrary code, so it is refused. If you wrote this file yourself, "
                "load it once with DataProto.load_from_disk(path, allow_pickle=True) and save it again"
            ) from error
    else:
        batch = None if parts["batch"] is None else TensorDict(parts["batch"], batch_size=parts["batch_size"])
        return batch, parts["non_tensor_batch"], parts["meta_info"]
    logger.warning("loading %s with pickle because allow_pickle=True: only for files you wrote yourself", filepath)
    with open(filepath, "rb") as f:
        return pickle.load(f)
