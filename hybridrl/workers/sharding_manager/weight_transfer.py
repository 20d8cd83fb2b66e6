"""Cross-pool weight transfer: the actor's weights reach rollout workers in other processes through Ray's object store.

The hybrid engine (``hybrid_engine.py``) syncs an engine living in the actor's own process. When the rollout runs
on its own resource pool (``trainer.v1.trainer_mode=separate_async``), the weights travel instead::

    actor ranks (all)    publish_weights(version)
        iter_full_state_dict(actor)          collective: FSDP gathers layer by layer on every rank
        rank 0: cast to rollout.dtype → record samples → iter_buckets(update_weights_bucket_megabytes)
                → pack_bucket → ray.put (each bucket once)           → WeightPackage(version, bucket_refs, ...)
    driver               first_package(results)  → rollout_wg.receive_weights(package)   (non-blocking)
    rollout ranks (all)  receive_package(engine, package)
        for ref in bucket_refs: ray.get → unpack_bucket (checksums) → engine.update_weights
        verify sampled values (WeightSyncError) → policy_version = package.version

Two checks, both naming the tensor: a per-tensor checksum catches a bucket damaged between ``ray.put`` and
``ray.get`` (it is computed from the packed bytes), and the sampled-value comparison of ``weight_sync.py`` catches an
engine that dropped or renamed what it was given.

A bucket is one flat ``uint8`` numpy buffer plus a small table of contents, so Ray stores it out of band and
``ray.get`` on the same node maps it from shared memory without a copy; tensors are views into it, which the
engines only read (``param.copy_`` on hf, ``reload_weights`` on vLLM). Rollout workers on one node share one
copy. The buckets live in the object store until the driver drops the package (and every receive has finished).

LoRA actor: the package carries merged weights (``W + scaling · B @ A`` under the base names), as the hf rollout
gets them in the same-process path; vLLM's adapter-only path is not used across pools.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hybridrl.workers.rollout.base import BaseRollout
from hybridrl.workers.sharding_manager.weight_sync import (
    SyncRecord,
    WeightSyncError,
    iter_buckets,
    recording,
    verify_samples,
)

logger = logging.getLogger(__name__)
_MB = 1024 * 1024
# Offsets of tensors inside a bucket: a multiple of every dtype's size (view(dtype) needs it) and of the 8-byte
# checksum words; 64 also matches the cache line and the alignment of Ray's out-of-band buffers.
_ALIGN_BYTES = 64


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lies in a bucket's buffer.

    ``checksum`` is the wrapping int64 sum of the 8-byte words of ``[offset, offset + padded_nbytes)`` (the tail
    after ``nbytes`` is zero): order-free, so it is exact, and torch computes it at memory speed.
    """

    name: str
    dtype: str  # torch dtype name, e.g. "bfloat16"
    shape: tuple[int, ...]
    offset: int  # bytes, a multiple of _ALIGN_BYTES
    nbytes: int
    checksum: int


@dataclass
class PackedBucket:
    """What one ``ray.put`` stores: ``data`` (flat ``uint8``, ``[sum of padded sizes]``) and its table of contents."""

    entries: list[TensorEntry]
    data: np.ndarray  # uint8 [num_bytes]


@dataclass
class WeightPackage:
    """One published version of the actor's weights (the driver passes it to ``receive_weights``).

    Attributes:
        version: the policy version the weights belong to (the driver's counter).
        bucket_refs: one ``ray.ObjectRef`` per bucket (each a :class:`PackedBucket`), in state-dict order.
        record: sampled expected values (engine dtype) for the post-load check.
        total_bytes: bytes of all tensors in ``dtype`` (padding excluded).
        num_tensors: number of state-dict entries.
        pack_s: seconds rank 0 spent gathering, casting, packing and putting.
        dtype: torch dtype name the tensors were cast to (``rollout.dtype``).
        sample_mode: index scheme of ``record`` (``BaseRollout.sample_mode``).
    """

    version: int
    bucket_refs: list[Any]
    record: SyncRecord
    total_bytes: int
    num_tensors: int
    pack_s: float
    dtype: str
    sample_mode: str = "strided"
    bucket_bytes: list[int] = field(default_factory=list)  # padded buffer size of each bucket

    @property
    def total_mb(self) -> float:
        return self.total_bytes / _MB


# ---------------------------------------------------------------------------- buckets


def _padded(nbytes: int) -> int:
    return -(-nbytes // _ALIGN_BYTES) * _ALIGN_BYTES


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat ``uint8`` CPU tensor (a view when already contiguous on CPU)."""
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def _word_sum(region: torch.Tensor) -> int:
    """Wrapping int64 sum of a ``uint8`` region whose length is a multiple of 8."""
    return int(region.view(torch.int64).sum().item())


def _readable_tensor(data: np.ndarray) -> torch.Tensor:
    """A ``uint8`` torch view of ``data``; buffers from ``ray.get`` are read-only and we only read them."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(data)


def pack_bucket(named_tensors: Sequence[tuple[str, torch.Tensor]]) -> PackedBucket:
    """Copy ``(name, tensor)`` pairs into one aligned ``uint8`` buffer with a checksum per tensor."""
    offsets, offset = [], 0
    for _, tensor in named_tensors:
        offsets.append(offset)
        offset += _padded(tensor.numel() * tensor.element_size())
    data = np.zeros(offset, dtype=np.uint8)
    buffer = torch.from_numpy(data)
    entries = []
    for (name, tensor), start in zip(named_tensors, offsets):
        nbytes = tensor.numel() * tensor.element_size()
        buffer[start : start + nbytes].copy_(_as_bytes(tensor))
        checksum = _word_sum(buffer[start : start + _padded(nbytes)])
        dtype_name = str(tensor.dtype).removeprefix("torch.")
        entries.append(TensorEntry(name, dtype_name, tuple(tensor.shape), start, nbytes, checksum))
    return PackedBucket(entries, data)


def unpack_bucket(bucket: PackedBucket) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` views into the bucket's buffer, every checksum checked.

    Raises:
        WeightSyncError: a tensor's bytes differ from what the actor packed (names the tensor).
    """
    buffer = _readable_tensor(bucket.data)
    tensors = []
    for entry in bucket.entries:
        region = buffer[entry.offset : entry.offset + _padded(entry.nbytes)]
        if region.numel() != _padded(entry.nbytes) or _word_sum(region) != entry.checksum:
            raise WeightSyncError(
                f"weight transfer: tensor {entry.name!r} ({entry.dtype} {list(entry.shape)}) arrived damaged: its "
                f"checksum differs from the one the actor computed when packing it. The bucket was modified or "
                f"truncated between ray.put and ray.get (object store spilling/restore or memory corruption); the "
                f"rollout engine was left with a partial update, so publish the weights again."
            )
        dtype = getattr(torch, entry.dtype)
        tensors.append((entry.name, region[: entry.nbytes].view(dtype).reshape(entry.shape)))
    return tensors


# ---------------------------------------------------------------------------- actor side


def _ray_put(bucket: PackedBucket) -> Any:
    import ray

    return ray.put(bucket)


def _ray_get(ref: Any) -> PackedBucket:
    import ray

    return ray.get(ref)


def _cast(named_tensors: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in named_tensors:
        yield name, tensor.detach().to(device="cpu", dtype=dtype)


def publish_state_dict(
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    *,
    version: int,
    engine_dtype: torch.dtype,
    bucket_bytes: int,
    is_publisher: bool,
    sample_mode: str = "strided",
    put: Callable[[PackedBucket], Any] | None = None,
) -> WeightPackage | None:
    """Pack a full state dict into buckets in Ray's object store (the publisher) or just drain it (other ranks).

    Args:
        named_tensors: ``(HF name, full tensor)`` pairs; with FSDP this iterator is collective, so every actor
            rank must consume it.
        version: the policy version to stamp on the package.
        engine_dtype: ``rollout.dtype``: what the engines hold (cast here, once, so buckets carry engine bytes).
        bucket_bytes: ``rollout.update_weights_bucket_megabytes`` in bytes.
        is_publisher: True on exactly one rank (rank 0).
        sample_mode: the rollout engine's ``sample_mode``.
        put: stores a bucket and returns its reference (default ``ray.put``).

    Returns:
        The package on the publisher, None elsewhere.
    """
    if not is_publisher:
        for _ in named_tensors:  # take part in the collective gathers
            pass
        return None
    put = put or _ray_put
    start = time.perf_counter()
    record = SyncRecord()
    refs, sizes = [], []
    stream = recording(_cast(named_tensors, engine_dtype), record, engine_dtype, sample_mode)
    for bucket in iter_buckets(stream, bucket_bytes):
        packed = pack_bucket(bucket)
        sizes.append(int(packed.data.nbytes))
        refs.append(put(packed))
        del packed, bucket  # the object store holds the only copy now
    return WeightPackage(
        version=int(version),
        bucket_refs=refs,
        record=record,
        total_bytes=record.num_bytes,
        num_tensors=record.num_tensors,
        pack_s=time.perf_counter() - start,
        dtype=str(engine_dtype).removeprefix("torch."),
        sample_mode=sample_mode,
        bucket_bytes=sizes,
    )


def first_package(results: Sequence[WeightPackage | None]) -> WeightPackage:
    """The package among ``publish_weights``' per-rank results (rank 0's; the others return None)."""
    packages = [result for result in results if result is not None]
    if len(packages) != 1:
        raise ValueError(
            f"publish_weights returned {len(packages)} packages over {len(results)} ranks; exactly one rank (rank 0 "
            f"of the actor group) publishes. Call it on the actor worker group with Dispatch.ONE_TO_ALL."
        )
    return packages[0]


# ---------------------------------------------------------------------------- rollout side


def _check_compatible(engine: BaseRollout, package: WeightPackage, engine_name: str) -> None:
    engine_dtype = str(engine.weight_dtype).removeprefix("torch.")
    if package.dtype != engine_dtype or package.sample_mode != engine.sample_mode:
        raise WeightSyncError(
            f"weight package v{package.version} was packed as {package.dtype} / {package.sample_mode} samples, but the "
            f"'{engine_name}' rollout engine holds {engine_dtype} / {engine.sample_mode}: set "
            f"actor_rollout_ref.rollout.dtype (and rollout.name) the same for the actor and the rollout worker groups."
        )


def receive_package(
    engine: BaseRollout,
    package: WeightPackage,
    *,
    engine_name: str,
    verify: bool = True,
    get: Callable[[Any], PackedBucket] | None = None,
) -> dict[str, float]:
    """Load every bucket of ``package`` into ``engine`` (in order), then verify the sampled values.

    Returns metrics: ``rollout/weight_sync_s`` (all of it), ``rollout/weight_transfer_s`` (``ray.get`` of the
    buckets), ``rollout/weight_sync_mb``, ``rollout/weight_sync_buckets``, ``rollout/weight_sync_tensors``,
    ``rollout/weight_sync_verified_tensors``, ``rollout/weight_sync_pack_s`` (the actor's side),
    ``rollout/weight_sync_version``.

    ``get`` fetches a bucket by reference (default ``ray.get``).

    Raises:
        WeightSyncError: a damaged bucket (names the tensor), or the engine does not hold the sent values.
    """
    get = get or _ray_get
    _check_compatible(engine, package, engine_name)
    start = time.perf_counter()
    fetch_s, num_tensors = 0.0, 0
    for ref in package.bucket_refs:
        fetch_start = time.perf_counter()
        bucket = get(ref)
        fetch_s += time.perf_counter() - fetch_start
        named_tensors = unpack_bucket(bucket)
        engine.update_weights(named_tensors)
        num_tensors += len(named_tensors)
        del bucket, named_tensors  # unpin the shared-memory buffer before the next bucket
    verified = 0
    if verify:
        actual = engine.read_weight_samples(package.record.indices)
        verified = verify_samples(package.record, actual, engine_name=engine_name, engine_dtype=engine.weight_dtype)
    metrics = {
        "rollout/weight_sync_s": time.perf_counter() - start,
        "rollout/weight_transfer_s": fetch_s,
        "rollout/weight_sync_mb": package.total_mb,
        "rollout/weight_sync_buckets": float(len(package.bucket_refs)),
        "rollout/weight_sync_tensors": float(num_tensors),
        "rollout/weight_sync_verified_tensors": float(verified),
        "rollout/weight_sync_pack_s": package.pack_s,
        "rollout/weight_sync_version": float(package.version),
    }
    logger.info(
        "weight sync v%d: %.1f MB in %d buckets, fetch %.3fs, total %.3fs, %d tensors verified",
        package.version, package.total_mb, len(package.bucket_refs), fetch_s, metrics["rollout/weight_sync_s"], verified,
    )  # fmt: skip
    return metrics
