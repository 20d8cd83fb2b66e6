"""Load Hugging Face models and tokenizers the way verl's workers do.

- causal LMs (actor, ref) via ``AutoModelForCausalLM`` (a vision-language model: ``AutoModelForImageTextToText``);
- token-classification models (critic, reward model) via ``AutoModelForTokenClassification`` with
  ``num_labels=1`` and ``classifier_dropout=0`` (a scalar head on every token).

Without an asked-for attention implementation, a model that resolves to ``sdpa`` runs ``hybridrl_varlen``
(:mod:`hybridrl.models.transformers.varlen_attention`): the same SDPA, without the dense mask of packed rows,
where the model registry lists its family for it (:mod:`hybridrl.models.families`).

Every rank loads the weights from disk (no meta-device init): simple and exact for the model sizes
hybridrl targets on CPU. Randomly initialised heads (the critic's ``score``) differ per rank, so
:func:`hybridrl.workers.engine.fsdp.apply_fsdp` broadcasts rank 0's weights before sharding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from hybridrl.models.families import FastPath, runs_fast_path
from hybridrl.models.multimodal import vision_language_auto_class
from hybridrl.models.transformers.varlen_attention import use_varlen_attention
from hybridrl.utils.fs import copy_to_local
from hybridrl.utils.model import update_model_config
from hybridrl.utils.tokenizer import hf_tokenizer

_MODEL_KINDS = ("causal_lm", "token_classification")


def load_hf_config(
    model_path: str, *, override_config: Mapping[str, Any] | None = None, trust_remote_code: bool = False
) -> Any:
    """``AutoConfig`` of ``model_path`` with ``override_config`` applied."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(copy_to_local(model_path), trust_remote_code=trust_remote_code)
    update_model_config(config, dict(override_config or {}))
    return config


def load_hf_model(
    model_path: str,
    *,
    kind: str = "causal_lm",
    torch_dtype: torch.dtype = torch.float32,
    override_config: Mapping[str, Any] | None = None,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
) -> tuple[nn.Module, Any]:
    """Load a HF model for training or inference. Returns ``(module, hf_config)``.

    Args:
        model_path: local folder (or ``file://`` URI) with ``config.json`` and weights.
        kind: ``causal_lm`` (logits ``[B, T, V]``) or ``token_classification`` (logits ``[B, T, 1]``).
        torch_dtype: dtype of the loaded weights (see ``precision.resolve_model_dtype``).
        override_config: HF config fields to override (verl's ``model.override_config``).
        attn_implementation: ``sdpa`` | ``eager`` | ``flash_attention_2`` | a registered name; None keeps HF's
            choice, except that ``sdpa`` becomes ``hybridrl_varlen`` (packed rows without a dense mask) for the
            families the model registry lists for it.
    """
    from transformers import AutoModelForTokenClassification

    if kind not in _MODEL_KINDS:
        raise ValueError(f"kind={kind!r} is not supported; use one of {_MODEL_KINDS}.")
    override = dict(override_config or {})
    attn_implementation = override.pop("attn_implementation", attn_implementation)
    config = load_hf_config(model_path, override_config=override, trust_remote_code=trust_remote_code)
    if kind == "token_classification":
        config.num_labels = 1
        config.classifier_dropout = 0.0
    auto_cls = vision_language_auto_class(config) if kind == "causal_lm" else AutoModelForTokenClassification
    kwargs: dict[str, Any] = {"config": config, "dtype": torch_dtype, "trust_remote_code": trust_remote_code}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # a new head (the critic's value head) starts the same in every run and rank
        module: Any = auto_cls.from_pretrained(copy_to_local(model_path), **kwargs)
    module.to(torch_dtype)  # a freshly initialised head (token classification) must match too
    if attn_implementation is None and runs_fast_path(module, FastPath.VARLEN_ATTENTION):
        use_varlen_attention(module)
    return module, module.config


def build_tokenizer(path: str, trust_remote_code: bool = False, custom_chat_template: str | None = None) -> Any:
    """Tokenizer with a pad token (pad := eos if missing) and an optional custom chat template."""
    return hf_tokenizer(
        copy_to_local(path), trust_remote_code=trust_remote_code, custom_chat_template=custom_chat_template
    )
