"""Write a standard Hugging Face folder (config, generation config, tokenizer, safetensors weights).

Shared by the checkpoint manager (``huggingface/`` in every checkpoint) and the model merger.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn


def unwrapped_model_class_name(module: nn.Module) -> str:
    """The HF class name under FSDP / peft wrapping (FSDP2 subclasses the model as ``FSDP<Class>``)."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if isinstance(module, FSDP):
        module = module.module
    if hasattr(module, "peft_config") and hasattr(module, "get_base_model"):  # LoRA: the base model's class
        return unwrapped_model_class_name(module.get_base_model())
    for cls in type(module).__mro__:
        if not issubclass(cls, FSDPModule):
            return cls.__name__
    return type(module).__name__


def save_hf_config(module: Any, target_dir: str, processing_class: Any = None) -> None:
    """``config.json`` (architectures = the unwrapped class), ``generation_config.json``, tokenizer files."""
    os.makedirs(target_dir, exist_ok=True)
    config = copy.deepcopy(module.config)
    config.architectures = [unwrapped_model_class_name(module)]
    config.save_pretrained(target_dir)
    generation_config = getattr(module, "generation_config", None)
    if generation_config is not None and getattr(module, "can_generate", lambda: False)():
        generation_config.save_pretrained(target_dir)
    if processing_class is not None:
        processing_class.save_pretrained(target_dir)


def model_class_from_config(hf_config: Any) -> type:
    """The transformers class named by ``config.architectures[0]`` (custom code: use ``--trust-remote-code``)."""
    import transformers

    architectures = getattr(hf_config, "architectures", None) or []
    if not architectures or not hasattr(transformers, architectures[0]):
        raise ValueError(
            f"config.architectures={architectures!r} does not name a transformers class; fix config.json "
            "in the checkpoint's huggingface/ folder."
        )
    return getattr(transformers, architectures[0])


def build_model_for_saving(hf_config: Any, state_dict: Mapping[str, torch.Tensor]) -> nn.Module:
    """Instantiate the model of ``hf_config`` on the meta device and assign ``state_dict`` to it.

    Non-persistent buffers (rotary ``inv_freq``) stay on meta: the model is for ``save_pretrained``
    only (reload the written folder to run it). Tied embeddings: a state dict carrying only one of the tied names (HF drops ``lm_head.weight``)
    is completed by ``tie_weights``; extra tied copies are accepted.
    """
    model_cls: Any = model_class_from_config(hf_config)
    with torch.device("meta"):
        model = model_cls._from_config(hf_config, dtype=_state_dict_dtype(state_dict))
    missing, unexpected = model.load_state_dict(dict(state_dict), strict=False, assign=True)
    model.tie_weights()
    still_meta = [name for name, p in model.named_parameters() if p.is_meta]
    if still_meta or unexpected:
        raise ValueError(
            f"state dict does not match {model_cls.__name__}: missing {still_meta}, unexpected {unexpected}"
        )
    return model


def _state_dict_dtype(state_dict: Mapping[str, torch.Tensor]) -> torch.dtype:
    floating = [t.dtype for t in state_dict.values() if t.is_floating_point()]
    return floating[0] if floating else torch.float32


def save_hf_model(
    hf_config: Any, state_dict: Mapping[str, torch.Tensor], target_dir: str, processing_class: Any = None
) -> None:
    """Write ``target_dir`` as a standard HF folder (safetensors) from a full state dict."""
    model: Any = build_model_for_saving(hf_config, state_dict)
    model.save_pretrained(target_dir, safe_serialization=True)
    if processing_class is not None:
        processing_class.save_pretrained(target_dir)
