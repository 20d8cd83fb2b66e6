"""Which model families hybridrl's fast paths support, by Hugging Face ``model_type``: one table.

Every fast path asks :func:`runs_fast_path` (or :func:`supports`, which logs nothing) before it changes how a
model runs; the answer comes from ``FAMILIES`` and nowhere else (no call site compares model types itself). A
model whose family is not listed for a path runs that path's plain transformers code, and the process logs a
one-line notice naming the ``model_type`` and the path, once per process per pair. The structural checks of
each path stay where they are and apply on top (a sliding-window layer keeps ``DynamicCache`` and the dense mask,
a multimodal config keeps its attention, a small output head keeps ``F.linear``).

    path                    what it does                                        plain path instead
    preallocated_kv_cache   decode loop writes keys/values in place             transformers' DynamicCache
    varlen_attention        packed (remove-padding) forward, no dense mask      sdpa with a block-diagonal mask
    shared_prefix           actor forward runs each distinct prompt once        the padded forward
    packed_head             decode step's output head over a oneDNN weight      F.linear
    fp32_attention          bf16/fp16 CPU decode computes attention in fp32     the model's own attention
    ulysses                 Ulysses sequence-parallel attention                 none: an error names the fix
    megatron                built-in HF <-> megatron-core converter             none: an error names the fix
    router_replay           MoE router hooks: aux loss, expert load, replay     none: an error names the fix

Evidence: a tiny random model of each listed family gives the plain path's log-probs and greedy tokens through
its listed decode, varlen and shared-prompt paths (tests/models/test_families_on_cpu.py); qwen2 and llama (the
tiny test models, SmolLM2) are tested end to end, Ulysses over 2 gloo ranks on qwen2
(tests/utils/test_ulysses_on_cpu.py; the other full-attention families run the same varlen kernel in it) and the
megatron converter on both (tests/megatron/); the router hooks on qwen3_moe (aux loss, load metrics, rollout
record and replay: tests/workers/actor/test_moe_actor_on_cpu.py, tests/workers/rollout/test_routing_record_on_cpu.py)
and gpt_oss (aux loss and replay). Families without sdpa in transformers (gemma2, gpt_oss) have no
attention path.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "FAMILIES",
    "FastPath",
    "ModelFamily",
    "family_of",
    "model_type_of",
    "model_types_for",
    "runs_fast_path",
    "supports",
]

logger = logging.getLogger(__name__)


class FastPath(str, Enum):
    """A path that runs a model differently from plain transformers (see the module docstring)."""

    PREALLOCATED_KV_CACHE = "preallocated_kv_cache"
    VARLEN_ATTENTION = "varlen_attention"
    SHARED_PREFIX = "shared_prefix"
    PACKED_HEAD = "packed_head"
    FP32_ATTENTION = "fp32_attention"
    ULYSSES = "ulysses"
    MEGATRON = "megatron"
    ROUTER_REPLAY = "router_replay"


@dataclass(frozen=True)
class ModelFamily:
    """One architecture family: the HF ``model_type``s it covers and the fast paths that support it.

    ``qkv_bias``: the q/k/v projections carry a bias although ``config.attention_bias`` is unset (Qwen2); the
    megatron converter builds its attention with one.
    """

    name: str
    model_types: tuple[str, ...]
    fast_paths: frozenset[FastPath]
    qkv_bias: bool = False


# the decoder-only text families the CPU fast paths were checked on (attention through transformers' interface)
_DECODER_PATHS = frozenset(
    {
        FastPath.PREALLOCATED_KV_CACHE,
        FastPath.VARLEN_ATTENTION,
        FastPath.SHARED_PREFIX,
        FastPath.PACKED_HEAD,
        FastPath.FP32_ATTENTION,
        FastPath.ULYSSES,
    }
)

FAMILIES: tuple[ModelFamily, ...] = (
    ModelFamily("llama", ("llama",), _DECODER_PATHS | {FastPath.MEGATRON}),
    ModelFamily("qwen2", ("qwen2",), _DECODER_PATHS | {FastPath.MEGATRON}, qkv_bias=True),
    ModelFamily("qwen3", ("qwen3",), _DECODER_PATHS),
    ModelFamily("qwen3_moe", ("qwen3_moe",), _DECODER_PATHS | {FastPath.ROUTER_REPLAY}),
    ModelFamily("mistral", ("mistral",), _DECODER_PATHS),
    ModelFamily("phi3", ("phi3",), _DECODER_PATHS),
    ModelFamily("olmo2", ("olmo2",), _DECODER_PATHS),
    # sliding-window layers: DynamicCache and the dense mask (structural checks); the Ulysses kernel has no window
    ModelFamily("gemma3", ("gemma3_text",), _DECODER_PATHS - {FastPath.ULYSSES}),
    # no sdpa in transformers (eager only): the attention paths cannot apply (sliding layers, gpt_oss's sinks)
    ModelFamily("gemma2", ("gemma2",), frozenset({FastPath.SHARED_PREFIX, FastPath.PACKED_HEAD})),
    ModelFamily(
        "gpt_oss", ("gpt_oss",), frozenset({FastPath.SHARED_PREFIX, FastPath.PACKED_HEAD, FastPath.ROUTER_REPLAY})
    ),
)

_BY_MODEL_TYPE = {model_type: family for family in FAMILIES for model_type in family.model_types}
_NOTIFIED: set[tuple[str | None, FastPath]] = set()


def model_type_of(model_or_config: Any) -> str | None:
    """The HF ``model_type`` of a config, or of a model's config (plain, FSDP2, or FSDP1-wrapped in ``.module``)."""
    for candidate in (model_or_config, getattr(model_or_config, "module", None)):
        config = getattr(candidate, "config", candidate)
        model_type = getattr(config, "model_type", None)
        if isinstance(model_type, str) and model_type:
            return model_type
    return None


def family_of(model_or_config: Any) -> ModelFamily | None:
    """The registry's family of a model or config; None when the registry does not list its ``model_type``."""
    return _BY_MODEL_TYPE.get(model_type_of(model_or_config))


def supports(model_or_config: Any, path: FastPath) -> bool:
    """Whether the registry lists this model's family for ``path`` (logs nothing)."""
    family = family_of(model_or_config)
    return family is not None and path in family.fast_paths


def model_types_for(path: FastPath) -> tuple[str, ...]:
    """The ``model_type``s the registry lists for ``path``, in table order."""
    return tuple(model_type for family in FAMILIES if path in family.fast_paths for model_type in family.model_types)


def runs_fast_path(model_or_config: Any, path: FastPath) -> bool:
    """:func:`supports`; when not, log (once per process per model type and path) that the plain transformers
    path runs instead."""
    if supports(model_or_config, path):
        return True
    model_type = model_type_of(model_or_config)
    if (model_type, path) not in _NOTIFIED:
        _NOTIFIED.add((model_type, path))
        family = family_of(model_or_config)
        known = "is not in" if family is None else f"(family {family.name}) is not listed for this path in"
        logger.warning(
            "hybridrl: model_type=%r %s the model registry (hybridrl.models.families): %s is off, the plain "
            "transformers path runs",
            model_type,
            known,
            path.value,
        )
    return False
