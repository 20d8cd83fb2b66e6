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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import torch
from torch import nn

from hybridrl.protocol import DataProto
from hybridrl.workers.rollout.base import BaseRollout
from hybridrl.workers.sharding_manager.weight_sync import (
    SyncRecord,
    iter_buckets,
    iter_full_state_dict,
    recording,
    verify_samples,
)

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
    ) -> None:
        self.engine = engine
        self.actor_module = actor_module
        self.engine_name = engine_name
        self.bucket_bytes = int(bucket_megabytes) * _MB
        self.free_cache_engine = free_cache_engine
        self.verify_weights = verify_weights
        self.state_dict_fn = state_dict_fn
        self._stale = actor_module is not None
        self.last_sync_metrics: dict[str, float] = {}

    @property
    def weights_stale(self) -> bool:
        return self._stale

    def mark_weights_stale(self) -> None:
        """Called by the worker after every actor update and after a checkpoint load."""
        if self.actor_module is not None:
            self._stale = True

    def sync_weights(self) -> dict[str, float]:
        """Push the actor's full weights to the engine in buckets, then verify them.

        Returns metrics: ``rollout/weight_sync_s``, ``rollout/weight_sync_mb``, ``rollout/weight_sync_tensors``,
        ``rollout/weight_sync_verified_tensors``.
        """
        if self.actor_module is None:
            raise RuntimeError("this rollout handle follows no actor module: nothing to sync")
        start = time.perf_counter()
        record = SyncRecord()
        dtype, mode = self.engine.weight_dtype, self.engine.sample_mode
        stream = recording(self.state_dict_fn(self.actor_module), record, dtype, mode)
        for bucket in iter_buckets(stream, self.bucket_bytes):
            self.engine.update_weights(bucket)
        verified = 0
        if self.verify_weights:
            actual = self.engine.read_weight_samples(record.indices)
            verified = verify_samples(record, actual, engine_name=self.engine_name, engine_dtype=dtype)
        self._stale = False
        self.last_sync_metrics = {
            "rollout/weight_sync_s": time.perf_counter() - start,
            "rollout/weight_sync_mb": record.num_bytes / _MB,
            "rollout/weight_sync_tensors": float(record.num_tensors),
            "rollout/weight_sync_verified_tensors": float(verified),
        }
        return self.last_sync_metrics

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Wake → sync if stale → generate → sleep; adds ``timing["weight_sync"]`` and sync metrics."""
        self.engine.wake()
        sync_metrics = self.sync_weights() if self._stale else {}
        try:
            output = self.engine.generate_sequences(prompts)
        finally:
            if self.free_cache_engine:
                self.engine.sleep()
        if sync_metrics:
            output.meta_info["timing"]["weight_sync"] = sync_metrics["rollout/weight_sync_s"]
            output.meta_info.setdefault("metrics", {}).update(sync_metrics)
        return output

    def verify(self) -> int:
        """Re-check the engine against the actor without loading anything (debug / tests)."""
        if self.actor_module is None:
            return 0
        record = SyncRecord()
        for _ in recording(
            self.state_dict_fn(self.actor_module), record, self.engine.weight_dtype, self.engine.sample_mode
        ):
            pass
        actual = self.engine.read_weight_samples(record.indices)
        return verify_samples(record, actual, engine_name=self.engine_name, engine_dtype=self.engine.weight_dtype)
