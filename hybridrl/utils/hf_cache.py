"""The KV-cache argument of a Hugging Face model's forward, across transformers versions.

transformers 5.25 renamed ``past_key_values`` to ``cache`` (input and output; the old name warns and goes in
5.40); the vLLM (5.19) and Megatron (4.57) environments keep the old name.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from torch import nn

__all__ = ["cache_kwarg", "output_cache"]


def cache_kwarg(module: nn.Module, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``module(..., **cache_kwarg(module, cache))`` (FSDP1's wrapper is looked through)."""
    return {_cache_argument_of(type(getattr(module, "module", module))): cache}


def output_cache(output: Any) -> Any:
    """The cache a forward with ``use_cache=True`` returned (``None`` if it returned none)."""
    return output.get("cache") if "cache" in output else output.get("past_key_values")


@functools.cache
def _cache_argument_of(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"
