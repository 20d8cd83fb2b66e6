"""HF ↔ megatron-core weights through mbridge (verl's ``megatron.use_mbridge=True`` path).

mbridge 0.15 targets the TransformerEngine layer spec. The model here is built by
:func:`hybridrl.workers.megatron.model.build_gpt_model` (local spec on CPU), so two things are adapted on the
bridge instance (never on mbridge's classes): the local spec's norm names (``input_layernorm.weight``,
``pre_mlp_layernorm.weight`` → HF ``input_layernorm`` / ``post_attention_layernorm``) and the parallel states,
read from megatron-core after :func:`hybridrl.workers.megatron.parallel.init_megatron_parallel`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["build_bridge", "iter_hf_weights_mbridge", "load_hf_weights_mbridge"]

_LOCAL_SPEC_MLP_NAMES = {"pre_mlp_layernorm.weight": ["model.layers.{layer_number}.post_attention_layernorm.weight"]}
_LOCAL_SPEC_OTHER_NAMES = {"input_layernorm.weight": ["model.layers.{layer_number}.input_layernorm.weight"]}


def build_bridge(hf_config: Any, dtype: torch.dtype) -> Any:
    """An mbridge ``Bridge`` for ``hf_config`` that also knows the local layer spec's norm names."""
    try:
        from mbridge import AutoBridge
    except ImportError as error:
        raise ImportError(
            "actor_rollout_ref.actor.megatron.use_mbridge=True needs mbridge (bash scripts/setup_megatron_env.sh), "
            "or set use_mbridge=False for the built-in Llama/Qwen2 converter."
        ) from error
    bridge = AutoBridge.from_config(hf_config, dtype=dtype)
    bridge._MLP_MAPPING = {**type(bridge)._MLP_MAPPING, **_LOCAL_SPEC_MLP_NAMES}
    bridge._OTHER_MAPPING = {**type(bridge)._OTHER_MAPPING, **_LOCAL_SPEC_OTHER_NAMES}
    return bridge


def load_hf_weights_mbridge(bridge: Any, model: nn.Module, model_path: str) -> None:
    """Load the HF folder ``model_path`` into this rank's ``GPTModel`` (TP rank 0 reads, scatters to the others)."""
    bridge.load_weights([model], model_path)


def iter_hf_weights_mbridge(bridge: Any, model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(HF name, full tensor)`` of this ``GPTModel`` on every rank (mbridge's ``export_weights``; collective)."""
    yield from bridge.export_weights([model])
