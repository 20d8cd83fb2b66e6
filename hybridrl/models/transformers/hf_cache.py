"""The KV-cache argument of a Hugging Face model's forward, across transformers versions.

transformers 5.25 renamed ``past_key_values`` to ``cache`` (input and output; the old name warns and goes in
5.40); the vLLM (5.19) and Megatron (4.57) environments keep the old name.

:func:`select_cache_rows` picks a cache's batch rows with ``index_select`` where transformers' own
``batch_select_indices`` indexes (``keys[indices, ...]``): both give the same rows, but in backward advanced
indexing accumulates through ``index_put_(accumulate=True)``, which on CPU in float32 adds concurrently from
several threads (the sum of rows that share a source row comes out in a different order each call, so two
runs of one seed part); ``index_select``'s backward (``index_add_``) adds them in index order. (Speed is not
the reason: on a quickstart micro-batch the accumulating ``index_put_`` took 86 ms of a 5.3 s fp32 forward and
backward.)
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch import nn

__all__ = ["cache_kwarg", "output_cache", "select_cache_rows"]


def cache_kwarg(module: nn.Module, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``module(..., **cache_kwarg(module, cache))`` (FSDP1's wrapper is looked through)."""
    return {_cache_argument_of(type(getattr(module, "module", module))): cache}


def output_cache(output: Any) -> Any:
    """The cache a forward with ``use_cache=True`` returned (``None`` if it returned none)."""
    return output.get("cache") if "cache" in output else output.get("past_key_values")


@functools.cache
def _cache_argument_of(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def select_cache_rows(cache: Any, indices: torch.Tensor) -> None:
    """Keep (and repeat) the cache's batch rows ``indices [B']``, in place, differentiably and deterministically.

    Each filled dynamic layer's ``keys``/``values [B, kvh, T, d]`` become ``[B', kvh, T, d]``; gradients of row ``j``
    flow back to row ``indices[j]`` (summed over repeats in index order). Other layers (empty, or not transformers'
    dynamic ones) and caches without ``layers`` go through their own ``batch_select_indices``.
    """
    layers = getattr(cache, "layers", None)
    if layers is None:
        cache.batch_select_indices(indices)
        return
    dynamic_layer = _dynamic_layer_class()
    for layer in layers:
        if isinstance(layer, dynamic_layer) and layer.get_seq_length() > 0:  # transformers' own condition
            layer.keys, layer.values = layer.keys.index_select(0, indices), layer.values.index_select(0, indices)
        else:
            layer.batch_select_indices(indices)


@functools.cache
def _dynamic_layer_class() -> tuple[type, ...]:
    """transformers' ``DynamicLayer`` for ``isinstance``; ``()`` (matches nothing) before the per-layer caches."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return ()
    return (DynamicLayer,)
