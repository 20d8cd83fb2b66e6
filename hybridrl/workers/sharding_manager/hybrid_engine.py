"""The hybrid engine: the rollout engine follows the FSDP actor living in the same process.

One ``generate_sequences`` call (verl 0.5's ``with sharding_manager: rollout.generate_sequences``)::

    engine.wake()                                  # re-acquire weights / KV cache memory
    if stale:                                      # after every actor update or checkpoint load
        for bucket in buckets(iter_full_state_dict(actor)):   # gathered layer by layer
            engine.update_weights(bucket)
        verify: engine's sampled values == trainer's    # WeightSyncError with a diagnosis otherwise
    out = engine.generate_sequences(prompts)
    engine.sleep()                                 # give memory back to training (free_cache_engine)

All ranks call it together (the full-state-dict gather of FSDP is collective).

LoRA actor + an engine with its own LoRA path (vLLM built with ``enable_lora``; verl 0.5's
``base_sync_done``): the first sync streams the frozen base weights (verified as above), every sync
then hands over only the adapter (``engine.load_lora_adapter``), checks that the engine serves exactly
that adapter and compares sampled ``A`` / ``scaling · B`` values. An adapter the engine refuses
(``LoRAAdapterRejected``) switches the handle to merged weights for good, with a logged reason.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from hybridrl.protocol import DataProto
from hybridrl.workers.engine.lora import unwrap_peft
from hybridrl.workers.rollout import build_rollout
from hybridrl.workers.rollout.base import BaseRollout, LoRAAdapterRejected
from hybridrl.workers.sharding_manager.weight_sync import (
    SyncRecord,
    WeightSyncError,
    gather_adapter,
    iter_base_state_dict,
    iter_buckets,
    iter_full_state_dict,
    record_adapter,
    recording,
    verify_samples,
)

logger = logging.getLogger(__name__)
_MB = 1024 * 1024
StateDictFn = Callable[[nn.Module], Iterable[tuple[str, torch.Tensor]]]


class RolloutHandle:
    """What ``ActorRolloutRefWorker`` holds: a rollout engine plus the train → rollout weight sync.

    Args:
        engine: the rollout engine (hf / vllm / sglang).
        actor_module: the (FSDP-wrapped or plain) training module the engine follows; None for a
            standalone rollout whose engine loaded its weights itself (main_generation).
        engine_name: ``rollout.name`` (for messages).
        bucket_megabytes: ``rollout.update_weights_bucket_megabytes``.
        free_cache_engine: ``rollout.free_cache_engine``: sleep after generation.
        verify_weights: check the engine's weights after each sync.
        state_dict_fn: full-state-dict iterator (default: the engine's ``iter_full_state_dict``).
        sync_context: called for a context manager entered around each whole sync (the export's iterator and
            the engine's last bucket included): e.g. an offloaded actor's params brought to the device for it.
    """

    def __init__(
        self,
        engine: BaseRollout,
        actor_module: nn.Module | None,
        *,
        engine_name: str,
        bucket_megabytes: int = 512,
        free_cache_engine: bool = True,
        verify_weights: bool = True,
        state_dict_fn: StateDictFn = iter_full_state_dict,
        sync_context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
    ) -> None:
        self.engine = engine
        self.actor_module = actor_module
        self.engine_name = engine_name
        self.bucket_bytes = int(bucket_megabytes) * _MB
        self.free_cache_engine = free_cache_engine
        self.verify_weights = verify_weights
        self.state_dict_fn = state_dict_fn
        self.sync_context = sync_context
        self._stale = actor_module is not None
        self._base_synced = False  # adapter mode: the frozen base weights are loaded once
        self.last_sync_metrics: dict[str, float] = {}
        # the version of the weights a rollout-only engine holds: 0 = model.path's, then each received package's
        self.policy_version = 0

    @property
    def weights_stale(self) -> bool:
        return self._stale

    def mark_weights_stale(self) -> None:
        """Called by the worker after every actor update and after a checkpoint load."""
        if self.actor_module is not None:
            self._stale = True

    @property
    def adapter_mode(self) -> bool:
        """True when the engine takes the actor's LoRA adapter instead of merged weights."""
        if self.actor_module is None or not getattr(self.engine, "lora_adapter_mode", False):
            return False
        return unwrap_peft(self.actor_module) is not None

    def sync_weights(self) -> dict[str, float]:
        """Push the actor's weights to the engine (full weights in buckets, or base once + adapter), then verify.

        Returns metrics: ``rollout/weight_sync_s``, ``rollout/weight_sync_mb``, ``rollout/weight_sync_tensors``,
        ``rollout/weight_sync_verified_tensors``, ``rollout/weight_sync_lora_adapter`` (1.0 in adapter mode),
        in adapter mode also ``rollout/weight_sync_verified_adapter_tensors``.
        """
        if self.actor_module is None:
            raise RuntimeError("this rollout handle follows no actor module: nothing to sync")
        start = time.perf_counter()
        with self.sync_context():
            counts = self._sync_adapter_or_fallback() if self.adapter_mode else self._sync_full(self.state_dict_fn)
        self._stale = False
        self.last_sync_metrics = {
            "rollout/weight_sync_s": time.perf_counter() - start,
            "rollout/weight_sync_mb": counts.pop("bytes") / _MB,
            "rollout/weight_sync_lora_adapter": float(self.adapter_mode),
            **{f"rollout/weight_sync_{key}": float(value) for key, value in counts.items()},
        }
        return self.last_sync_metrics

    def _sync_full(self, state_dict_fn: StateDictFn) -> dict[str, int]:
        """Stream ``state_dict_fn(actor)`` in buckets and verify; returns ``bytes``, ``tensors``, ``verified_tensors``."""
        record = SyncRecord()
        dtype, mode = self.engine.weight_dtype, self.engine.sample_mode
        stream = recording(state_dict_fn(self.actor_module), record, dtype, mode)
        for bucket in iter_buckets(stream, self.bucket_bytes):
            self.engine.update_weights(bucket)
        verified = 0
        if self.verify_weights:
            actual = self.engine.read_weight_samples(record.indices)
            verified = verify_samples(record, actual, engine_name=self.engine_name, engine_dtype=dtype)
        return {"bytes": record.num_bytes, "tensors": record.num_tensors, "verified_tensors": verified}

    def _sync_adapter_or_fallback(self) -> dict[str, int]:
        try:
            return self._sync_adapter()
        except LoRAAdapterRejected as err:
            logger.warning("%s; the %s rollout gets merged LoRA weights from now on", err, self.engine_name)
            self.engine.disable_lora_adapter()
            return self._sync_full(self.state_dict_fn)

    def _sync_adapter(self) -> dict[str, int]:
        """Base weights on the first call, then the adapter; counts as ``_sync_full`` + ``verified_adapter_tensors``."""
        base = {"bytes": 0, "tensors": 0, "verified_tensors": 0}
        if not self._base_synced:
            base = self._sync_full(iter_base_state_dict)
            self._base_synced = True
        adapter, scalings, peft_config = gather_adapter(self.actor_module)
        record = record_adapter(adapter, scalings, self.engine.weight_dtype, self.engine.sample_mode)
        self.engine.load_lora_adapter(adapter, peft_config)
        verified = self._verify_adapter(record) if self.verify_weights else 0
        return {
            "bytes": base["bytes"] + record.num_bytes,
            "tensors": base["tensors"] + record.num_tensors,
            "verified_tensors": base["verified_tensors"] + verified,
            "verified_adapter_tensors": verified,
        }

    def _verify_adapter(self, record: SyncRecord) -> int:
        """The engine serves exactly its current adapter and holds the trainer's sampled values."""
        served, current = self.engine.served_adapter_ids(), self.engine.adapter_id
        if served != {current}:
            raise WeightSyncError(
                f"rollout engine '{self.engine_name}' serves LoRA adapters {sorted(served)} after the sync, expected "
                f"only the new one ({current}): the previous adapter was not removed or the new one not registered."
            )
        actual = self.engine.read_adapter_samples(record.indices)
        dtype = self.engine.weight_dtype
        return verify_samples(record, actual, engine_name=self.engine_name, engine_dtype=dtype)

    def wake_up(self) -> dict[str, float]:
        """Wake the engine and push the actor's weights if stale; returns the sync metrics ({} when none).

        The first half of ``generate_sequences``; server mode (``rollout.mode=async``) serves requests in between."""
        self.engine.wake()
        return self.sync_weights() if self._stale else {}

    def sleep(self) -> None:
        """Give the engine's memory back to training (when ``free_cache_engine``)."""
        if self.free_cache_engine:
            self.engine.sleep()

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Wake → sync if stale → generate → sleep; adds ``timing["weight_sync"]`` and sync metrics."""
        sync_metrics = self.wake_up()
        try:
            output = self.engine.generate_sequences(prompts)
        finally:
            self.sleep()
        if sync_metrics:
            output.meta_info["timing"]["weight_sync"] = sync_metrics["rollout/weight_sync_s"]
            output.meta_info.setdefault("metrics", {}).update(sync_metrics)
        return output

    def verify(self) -> int:
        """Re-check the engine against the actor without loading anything (debug / tests)."""
        if self.actor_module is None:
            return 0
        dtype, mode = self.engine.weight_dtype, self.engine.sample_mode
        adapter_mode = self.adapter_mode
        record = SyncRecord()
        stream_fn = iter_base_state_dict if adapter_mode else self.state_dict_fn
        for _ in recording(stream_fn(self.actor_module), record, dtype, mode):
            pass
        actual = self.engine.read_weight_samples(record.indices)
        verified = verify_samples(record, actual, engine_name=self.engine_name, engine_dtype=dtype)
        if adapter_mode:
            adapter, scalings, _ = gather_adapter(self.actor_module)
            verified += self._verify_adapter(record_adapter(adapter, scalings, dtype, mode))
        return verified


def build_rollout_handle(
    rollout_config: Any, model_config: Any, *, tokenizer: Any, hf_config: Any, actor_module: Any, device_name: str
) -> RolloutHandle:
    """The engine named by ``rollout.name`` (:func:`hybridrl.workers.rollout.build_rollout`, same arguments)
    inside the handle that keeps it in step with ``actor_module``."""
    engine = build_rollout(
        rollout_config,
        model_config,
        tokenizer=tokenizer,
        hf_config=hf_config,
        actor_module=actor_module,
        device_name=device_name,
    )
    return RolloutHandle(
        engine,
        actor_module,
        engine_name=rollout_config.name,
        bucket_megabytes=int(rollout_config.update_weights_bucket_megabytes),
        free_cache_engine=bool(rollout_config.free_cache_engine),
    )
