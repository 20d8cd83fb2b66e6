"""Initial weights from a megatron-core distributed checkpoint (verl 0.5's ``megatron.use_dist_checkpointing``).

With ``<section>.megatron.use_dist_checkpointing=True`` a role's ``GPTModel`` takes its weights from
``<section>.megatron.dist_checkpointing_path`` (a folder written by
``python -m hybridrl.workers.megatron.converter_hf_to_mcore``, or by verl's ``scripts/converter_hf_to_mcore.py``)
instead of converting the HF folder on every rank. The checkpoint holds global tensors with their shard layout, so
one written at TP=1 loads at any TP (megatron-core reshards: :func:`megatron.core.dist_checkpointing.load`).

Format (megatron-core's ``torch_dist`` backend)::

    metadata.json        {"sharded_backend": "torch_dist", "common_backend": "torch", ...}   JSON
    common.pt            non-sharded state (empty for a model)                               torch.save
    .metadata            torch.distributed.checkpoint's index: tensor → file, offset         pickle
    __{rank}_{i}.distcp  the tensors                                                         torch.save per tensor

Nothing here runs arbitrary pickled code: ``.metadata`` is read by :func:`read_dcp_metadata` with an unpickler that
only builds the index classes of ``torch.distributed.checkpoint`` (refusing any other global, as
``torch.load(weights_only=True)`` does), and megatron-core's loader is handed a reader that uses it;
``common.pt`` and every tensor are read with ``torch.load(weights_only=True)``; the ``ShardedObject`` entries of
the model (modules' ``_extra_state``, pickled bytes; None for the local layer spec, TransformerEngine's FP8
scaling state on GPU) are not requested, so they are never unpickled.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["DIST_CHECKPOINT_BACKEND", "DistCheckpointError", "check_dist_checkpoint", "load_dist_checkpoint_weights",
           "model_sharded_tensors", "read_dcp_metadata"]

DIST_CHECKPOINT_BACKEND = "torch_dist"
_CONFIG_FILE, _COMMON_FILE, _INDEX_FILE = "metadata.json", "common.pt", ".metadata"
# the globals torch.distributed.checkpoint's index may name (measured on torch 2.13: a megatron-core 0.16 save)
_DCP = "torch.distributed.checkpoint"
_INDEX_GLOBALS = {
    f"{_DCP}.metadata": {"Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
                         "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING"},
    f"{_DCP}.filesystem": {"_StorageInfo"},
    f"{_DCP}.planner": {"SavePlan", "WriteItem", "TensorWriteData", "WriteItemType"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "collections": {"OrderedDict"},
    "builtins": {"set", "frozenset"},
}


class DistCheckpointError(ValueError):
    """A ``dist_checkpointing_path`` that cannot be loaded (the message names the config key)."""


class _IndexUnpickler(pickle.Unpickler):
    """Builds ``torch.distributed.checkpoint`` index objects only (allow-list of globals, as weights_only)."""

    def find_class(self, module: str, name: str) -> Any:
        if name in _INDEX_GLOBALS.get(module, ()) or (module == "torch" and _is_dtype(name)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not part of a torch.distributed.checkpoint index")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not part of a torch.distributed.checkpoint index")


def _is_dtype(name: str) -> bool:
    return isinstance(getattr(torch, name, None), torch.dtype)


def read_dcp_metadata(path: str, key: str = "dist_checkpointing_path", file_name: str = _INDEX_FILE) -> Any:
    """``torch.distributed.checkpoint.Metadata`` of the checkpoint folder ``path``, unpickled with an allow-list.

    Raises:
        DistCheckpointError: the file is missing or names a global outside the index classes (``key`` in the message).
    """
    file = os.path.join(path, file_name)
    if not os.path.isfile(file):
        raise DistCheckpointError(f"{key}={path!r}: {file_name} is missing: the checkpoint is incomplete (a save "
                                  "that did not finish, or a partial copy). Convert it again.")
    with open(file, "rb") as handle:
        data = handle.read()
    try:
        return _IndexUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError) as error:
        raise DistCheckpointError(
            f"{key}={path!r}: {file_name} is not a torch.distributed.checkpoint index that can be read without "
            f"running pickled code ({error}); hybridrl refuses it. Write the checkpoint again with "
            "`python -m hybridrl.workers.megatron.converter_hf_to_mcore`."
        ) from error


def check_dist_checkpoint(path: Any, key: str) -> Any:
    """The index (``Metadata``) of a complete megatron-core ``torch_dist`` checkpoint at ``path``.

    ``key``: the config key that named ``path`` (``actor_rollout_ref.actor.megatron.dist_checkpointing_path``).

    Raises:
        DistCheckpointError: ``path`` is None / not a folder / not a megatron-core dist checkpoint (no
            ``metadata.json``, another backend) / incomplete (``common.pt``, ``.metadata`` or a data file missing).
    """
    if path is None or str(path) == "":
        raise DistCheckpointError(
            f"{key} is null but use_dist_checkpointing=True: set it to a megatron-core dist checkpoint folder (write "
            "one with `python -m hybridrl.workers.megatron.converter_hf_to_mcore --hf_model_path <HF folder> "
            "--output_path <folder>`), or set use_dist_checkpointing=False to convert the HF weights at start."
        )
    path = os.path.expanduser(str(path))
    if not os.path.isdir(path):
        raise DistCheckpointError(f"{key}={path!r} is not a folder (use_dist_checkpointing=True needs a megatron-core "
                                  "dist checkpoint written by converter_hf_to_mcore).")
    _check_backend(path, key)
    if not os.path.isfile(os.path.join(path, _COMMON_FILE)):
        raise DistCheckpointError(f"{key}={path!r}: {_COMMON_FILE} is missing: the checkpoint is incomplete. "
                                  "Convert it again.")
    metadata = read_dcp_metadata(path, key)
    missing = sorted({info.relative_path for info in (metadata.storage_data or {}).values()
                      if not os.path.isfile(os.path.join(path, info.relative_path))})
    if missing:
        raise DistCheckpointError(f"{key}={path!r}: data file(s) {missing[:3]} of its index are missing: the "
                                  "checkpoint is incomplete (a partial copy?). Convert it again.")
    return metadata


def _check_backend(path: str, key: str) -> None:
    config_file = os.path.join(path, _CONFIG_FILE)
    if not os.path.isfile(config_file):
        raise DistCheckpointError(
            f"{key}={path!r} is not a megatron-core dist checkpoint (no {_CONFIG_FILE}). Point it at the folder "
            "written by `python -m hybridrl.workers.megatron.converter_hf_to_mcore` (an HF folder goes to "
            "model.path, with use_dist_checkpointing=False)."
        )
    try:
        with open(config_file) as handle:
            config = json.load(handle)
    except (OSError, ValueError) as error:
        raise DistCheckpointError(f"{key}={path!r}: {_CONFIG_FILE} is not valid JSON ({error}).") from error
    backends = (config.get("sharded_backend"), config.get("common_backend")) if isinstance(config, dict) else None
    if backends != (DIST_CHECKPOINT_BACKEND, "torch"):
        raise DistCheckpointError(
            f"{key}={path!r}: backends {backends} in {_CONFIG_FILE}; hybridrl loads megatron-core's "
            f"('{DIST_CHECKPOINT_BACKEND}', 'torch') format only (the default of megatron-core ≥ 0.7 and of "
            "converter_hf_to_mcore)."
        )


def model_sharded_tensors(gpt: nn.Module, value_model: bool) -> dict[str, Any]:
    """``gpt.sharded_state_dict()`` without its ``ShardedObject`` entries (pickled ``_extra_state``, never loaded)
    and, for a value model, without ``output_layer.*`` (its head comes from the HF folder, as verl's
    ``load_mcore_dist_weights(is_value_model=True)`` skips it): ``{state-dict name: ShardedTensor | factory}``."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    sharded = gpt.sharded_state_dict()
    return {name: item for name, item in sharded.items()
            if not isinstance(item, ShardedObject) and not (value_model and name.startswith("output_layer."))}


def _check_model_keys(sharded: dict[str, Any], metadata: Any, path: str, key: str) -> None:
    """Every tensor the model asks for is in the checkpoint's index (names as megatron-core stores them), with the
    model's global shape (the vocabulary rows may differ: megatron-core pads them to a TP multiple and reshards)."""
    stored = metadata.state_dict_metadata
    absent, wrong = [], []
    for name, item in sharded.items():
        stored_key = getattr(item, "key", name)
        if stored_key not in stored:
            absent.append(stored_key)
            continue
        shape, size = getattr(item, "global_shape", None), getattr(stored[stored_key], "size", None)
        if shape is not None and not getattr(item, "allow_shape_mismatch", False) and tuple(size) != tuple(shape):
            wrong.append(f"{stored_key}: stored {tuple(size)}, model {tuple(shape)}")
    if absent or wrong:
        found = [f"{len(absent)} tensor(s) missing, e.g. {absent[:3]}"] if absent else []
        found += [f"{len(wrong)} of another shape, e.g. {wrong[:2]}"] if wrong else []
        raise DistCheckpointError(
            f"{key}={path!r} does not match this model ({'; '.join(found)}). It was written for another model, or "
            "is incomplete; convert this model's HF folder (model.path) again."
        )


@torch.no_grad()
def load_dist_checkpoint_weights(gpt: nn.Module, path: Any, key: str, *, value_model: bool = False) -> int:
    """Copy the weights of the dist checkpoint ``path`` into this rank's ``GPTModel`` (collective over all ranks:
    call it on every rank after :func:`init_megatron_parallel`); returns how many parameters were set.

    ``value_model``: the output layer (value head) is left as it is.
    """
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.serialization import StrictHandling

    error: DistCheckpointError | None = None
    try:
        metadata = check_dist_checkpoint(path, key)
        path = os.path.expanduser(str(path))
        sharded = model_sharded_tensors(gpt, value_model)
        _check_model_keys(sharded, metadata, path, key)
    except DistCheckpointError as raised:
        error = raised
    _raise_on_every_rank(error)  # a rank that cannot load must not leave the others waiting in a collective
    with _restricted_index_reader(path, key):
        loaded = dist_checkpointing.load(sharded, path, sharded_strategy=_sharded_strategy(),
                                         common_strategy=_weights_only_common_load(key),
                                         strict=StrictHandling.ASSUME_OK_UNEXPECTED)
    count = 0
    for name, param in gpt.named_parameters():
        if value_model and name.startswith("output_layer."):
            continue
        if name not in loaded:
            raise DistCheckpointError(f"{key}={path!r}: the load returned no tensor for parameter {name!r}.")
        param.copy_(loaded[name].to(param.dtype).view_as(param))
        count += 1
    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        print(f"[megatron] {key}: {count} parameters loaded from the dist checkpoint {path}", flush=True)
    return count


def _raise_on_every_rank(error: DistCheckpointError | None) -> None:
    """Raise on every rank when a rank's checks failed (its own message, else the first failing rank's)."""
    messages: list[str | None] = [None if error is None else str(error)]
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        messages = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(messages, None if error is None else str(error))
    if error is not None:
        raise error
    failed = [(rank, message) for rank, message in enumerate(messages) if message is not None]
    if failed:
        raise DistCheckpointError(f"rank {failed[0][0]} cannot load the dist checkpoint: {failed[0][1]}")


def _sharded_strategy() -> Any:
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistLoadShardedStrategy

    return TorchDistLoadShardedStrategy()


def _weights_only_common_load(key: str) -> Any:
    """megatron-core's common-state loader with ``torch.load(weights_only=True)`` (megatron-core 0.16 relies on
    torch's default, which ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` turns off) and no ``ShardedObject`` loading (those
    would be unpickled; never requested here). Made on first use: megatron-core is imported lazily."""
    from megatron.core.dist_checkpointing.strategies.common import TorchCommonLoadStrategy

    class WeightsOnlyCommonLoad(TorchCommonLoadStrategy):
        def load_common(self, checkpoint_dir: Any) -> Any:
            file = os.path.join(checkpoint_dir, _COMMON_FILE)
            try:
                return torch.load(file, map_location="cpu", weights_only=True)
            except pickle.UnpicklingError as error:
                raise DistCheckpointError(
                    f"{key}={str(checkpoint_dir)!r}: {_COMMON_FILE} holds more than tensors and plain values; "
                    f"hybridrl reads it with torch.load(weights_only=True) and refuses it ({str(error)[:200]}...)."
                ) from error

        def load_sharded_objects(self, sharded_objects_state_dict: Any, checkpoint_dir: Any) -> Any:
            raise DistCheckpointError(f"{key}: hybridrl does not load ShardedObjects (pickled) from a dist checkpoint")

    return WeightsOnlyCommonLoad()


@contextlib.contextmanager
def _restricted_index_reader(path: str, key: str) -> Iterator[None]:
    """While megatron-core loads, its ``torch_dist`` strategy reads ``.metadata`` through :func:`read_dcp_metadata`
    instead of ``pickle.load`` (megatron-core 0.16 makes its reader in ``strategies.torch._get_filesystem_reader``)."""
    from megatron.core.dist_checkpointing.strategies import torch as torch_strategy
    from megatron.core.dist_checkpointing.strategies.cached_metadata_filesystem_reader import (
        CachedMetadataFileSystemReader,
    )
    from torch.distributed.checkpoint.metadata import StorageMeta

    if not hasattr(torch_strategy, "_get_filesystem_reader"):
        raise RuntimeError("this megatron-core has no strategies.torch._get_filesystem_reader (hybridrl was written "
                           "against 0.16): the dist checkpoint index cannot be read safely; use_dist_checkpointing "
                           "needs megatron-core 0.16 (scripts/setup_megatron_env.sh).")

    class RestrictedIndexReader(CachedMetadataFileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if self._cached_metadata is None:
                rank = kwargs.get("rank")
                name = _INDEX_FILE if rank is None else f"__{rank}{_INDEX_FILE}"
                metadata = read_dcp_metadata(str(self.path), key, name)
                if getattr(metadata, "storage_meta", None) is None:
                    metadata.storage_meta = StorageMeta()
                metadata.storage_meta.load_id = self.load_id
                self._cached_metadata = metadata
            return self._cached_metadata

    original = torch_strategy._get_filesystem_reader
    torch_strategy._get_filesystem_reader = lambda checkpoint_dir, cache_metadata=False: RestrictedIndexReader(
        checkpoint_dir)
    try:
        yield
    finally:
        torch_strategy._get_filesystem_reader = original
