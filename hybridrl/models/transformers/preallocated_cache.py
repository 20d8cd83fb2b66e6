"""A preallocated KV cache for the hf decode loop: in-place writes instead of a ``torch.cat`` per step.

transformers' ``DynamicCache`` grows every layer's keys and values with ``torch.cat`` at each decode step, so
step ``t`` copies the whole cache (``2 x layers x [B, kv_heads, P + t, head_dim]``): 13% of a SmolLM2 decode step
at batch 32 on CPU. ``PreallocatedCache`` holds each layer in one buffer ``[B, kv_heads, capacity, head_dim]``
sized for the prompt plus the response (``capacity``), writes the new position in place and hands attention the
view ``[:, :, :length]``. The values attention sees are the same tensors (same numbers, same length), so the
decode is unchanged bit for bit (tests/workers/rollout/test_decode_equality_on_cpu.py).

Only models whose layers all use full attention get it (``preallocated_cache_or_none``); sliding-window or
hybrid models keep ``DynamicCache``.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer, get_layer_types_and_kwargs


class PreallocatedLayer(DynamicLayer):
    """Keys/values of one decoder layer in buffers ``[B, kv_heads, capacity, head_dim]``.

    ``keys``/``values`` are always the views ``buffer[:, :, :length]`` (what ``DynamicLayer``'s readers expect).
    A write past ``capacity`` grows the buffer (one copy), so a wrong capacity costs time, never correctness.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = int(capacity)
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._key_buffer = self._empty_like(key_states, max(self.capacity, key_states.shape[-2]))
        self._value_buffer = self._empty_like(value_states, max(self.capacity, value_states.shape[-2]))
        self.length = 0
        self.is_initialized = True

    @staticmethod
    def _empty_like(states: torch.Tensor, capacity: int) -> torch.Tensor:
        batch, heads, _, dim = states.shape
        return states.new_empty((batch, heads, capacity, dim))

    def _refresh_views(self) -> None:
        self.keys = self._key_buffer[:, :, : self.length]
        self.values = self._value_buffer[:, :, : self.length]

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * self._key_buffer.shape[-2])
        for name in ("_key_buffer", "_value_buffer"):
            old = getattr(self, name)
            new = self._empty_like(old, capacity)
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``[B, kv_heads, q, head_dim]`` at positions ``length .. length + q`` and return the prefix views."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self._key_buffer.shape[-2]:
            self._grow(end)
        self._key_buffer[:, :, self.length : end] = key_states
        self._value_buffer[:, :, self.length : end] = value_states
        self.length = end
        self._refresh_views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def reset(self) -> None:
        self.length = 0
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        """``tokens_to_remove`` < 0 drops that many trailing positions (``DynamicLayer``'s convention)."""
        if tokens_to_remove > 0:
            raise ValueError("PreallocatedLayer.crop takes a negative count (tokens to remove from the end)")
        if self.is_initialized and tokens_to_remove:
            self.length = max(0, self.length + tokens_to_remove)
            self._refresh_views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self.batch_select_indices(torch.arange(self._key_buffer.shape[0], device=self.device).repeat_interleave(repeats))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep (or gather, with repeats) the rows ``indices`` of the batch: one copy of the filled prefix."""
        if not self.is_initialized:
            return
        indices = indices.to(self.device)
        for name in ("_key_buffer", "_value_buffer"):
            old = getattr(self, name)
            new = old.new_empty((indices.numel(), *old.shape[1:]))
            new[:, :, : self.length] = old[:, :, : self.length].index_select(0, indices)
            setattr(self, name, new)
        self._refresh_views()


class PreallocatedCache(DynamicCache):
    """A ``DynamicCache`` whose layers are ``PreallocatedLayer``s of ``capacity`` positions."""

    def __init__(self, num_layers: int, capacity: int) -> None:
        Cache.__init__(self, layers=[PreallocatedLayer(capacity) for _ in range(num_layers)])


def preallocated_cache_or_none(model_config: Any, capacity: int) -> PreallocatedCache | None:
    """A ``PreallocatedCache`` for ``model_config`` when every layer is full attention, else None (use
    ``DynamicCache``: sliding-window, chunked or KV-sharing layers keep transformers' own layer classes)."""
    decoder_config = model_config.get_text_config(decoder=True)
    layer_types, _ = get_layer_types_and_kwargs(decoder_config)
    if not layer_types or any(kind != "full_attention" for kind in layer_types):
        return None
    return PreallocatedCache(len(layer_types), capacity)
