"""LoRA with ``peft`` for RL and SFT (verl's ``model.lora_rank`` / ``lora_alpha`` / ``target_modules`` / ``exclude_modules``).

- :func:`apply_lora` wraps a HF model in a ``PeftModel`` before FSDP: only adapter weights
  (``lora_A``, ``lora_B``) require grad, so only they are optimised.
- :func:`apply_value_lora` does the same for the critic's token-classification value model; its freshly
  initialised value head (``score``) is trained in full as a peft ``modules_to_save`` copy.
- :func:`disable_adapter` is the reference policy: the same module with the adapters switched off
  (no second model in memory, as verl does when ``lora_rank > 0``).
- :func:`merge_lora_tensors` turns a stream of peft state-dict entries into the base model's names
  with ``W' = W + scaling · B @ A`` merged in (rollout weight sync, model merger, HF export).
- :func:`lora_adapter_state_dict` / :func:`save_lora_adapter` write the ``lora_adapter/`` folder
  that ``PeftModel.from_pretrained(base, folder)`` reads (verl's checkpoint layout).
- :func:`base_model_tensors` / :func:`scaled_adapter_tensors` feed an engine with its own LoRA path
  (vLLM): the frozen base weights once, then only the adapter at every sync.

Shapes: ``W [out, in]``, ``A [r, in]``, ``B [out, r]``; ``scaling = lora_alpha / r``
(``lora_alpha / sqrt(r)`` with rsLoRA).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from hybridrl.workers.engine.fsdp import fsdp_version
from hybridrl.workers.engine.state_dict import _full_tensor, iter_full_state_dict

__all__ = [
    "ADAPTER_SUBDIR",
    "adapter_module_path",
    "apply_lora",
    "apply_value_lora",
    "base_model_tensors",
    "base_name",
    "disable_adapter",
    "gather_lora_adapter",
    "is_adapter_key",
    "is_lora_key",
    "lora_adapter_state_dict",
    "lora_enabled",
    "lora_scalings",
    "merge_lora_tensors",
    "merged_state_dict",
    "peft_adapter_config",
    "read_adapter_scaling",
    "save_lora_adapter",
    "scaled_adapter_tensors",
    "unwrap_peft",
    "value_head_name",
]

ADAPTER_SUBDIR = "lora_adapter"
_PEFT_PREFIX = "base_model.model."
_WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
_ADAPTER = "default"
_SAVED_COPY = f".modules_to_save.{_ADAPTER}."  # trainable copy of a modules_to_save module (the value head)
_FROZEN_COPY = ".original_module."  # its frozen original, kept by peft beside the copy
VALUE_HEAD_NAMES = ("score", "classifier")  # HF *ForTokenClassification heads (Llama/Qwen: score; BERT: classifier)


def lora_enabled(model_config: Any) -> bool:
    """True when ``model.lora_rank > 0`` (a section without the key, like ``reward_model.model``, has no LoRA)."""
    return model_config is not None and int(model_config.get("lora_rank") or 0) > 0


def _target_modules(value: Any) -> Any:
    """``'all-linear'`` stays a string; an OmegaConf list becomes a plain list."""
    if value is None or isinstance(value, str):
        return value or "all-linear"
    return [str(v) for v in value]


def _lora_config(model_config: Any, task_type: Any, exclude: Any = None, modules_to_save: Any = None) -> Any:
    """peft ``LoraConfig`` from a ``model`` section (``lora_rank`` > 0, ``lora_alpha``, ``target_modules``)."""
    from peft import LoraConfig

    rank = int(model_config.lora_rank or 0)
    if rank <= 0:
        raise ValueError(f"apply_lora: model.lora_rank must be > 0, got {rank}.")
    return LoraConfig(
        task_type=task_type,
        r=rank,
        lora_alpha=int(model_config.lora_alpha),
        target_modules=_target_modules(model_config.target_modules),
        exclude_modules=exclude,
        modules_to_save=modules_to_save,
        bias="none",
    )


def _prepare_for_lora(module: nn.Module, model_config: Any) -> None:
    enable_input_grads = getattr(module, "enable_input_require_grads", None)
    if model_config.enable_gradient_checkpointing and callable(enable_input_grads):
        enable_input_grads()  # verl: frozen embeddings + checkpointing need grads on inputs


def apply_lora(module: nn.Module, model_config: Any) -> nn.Module:
    """Wrap ``module`` (a HF causal LM, not yet FSDP-wrapped) in a peft ``PeftModel`` (verl's LoRA settings).

    Args:
        module: the HF model.
        model_config: a ``model`` section with ``lora_rank`` (> 0), ``lora_alpha`` (default 16),
            ``target_modules`` (default ``all-linear``), ``exclude_modules`` (default None),
            ``enable_gradient_checkpointing``.

    Returns:
        the ``PeftModel``; base weights frozen, adapters trainable (``lora_B`` = 0, so the
        initial model equals the base model).
    """
    from peft import TaskType, get_peft_model

    exclude = model_config.get("exclude_modules")
    exclude = _target_modules(exclude) if exclude is not None else None
    lora_config = _lora_config(model_config, TaskType.CAUSAL_LM, exclude=exclude)  # rank checked first
    _prepare_for_lora(module, model_config)
    return get_peft_model(module, lora_config)


def value_head_name(module: nn.Module) -> str:
    """Name of the top-level value head (``nn.Linear``) of a HF token-classification model."""
    for name in VALUE_HEAD_NAMES:
        if isinstance(getattr(module, name, None), nn.Linear):
            return name
    raise ValueError(
        f"{type(module).__name__} has no value head named one of {VALUE_HEAD_NAMES} (an nn.Linear); "
        "critic LoRA needs a HF *ForTokenClassification model (critic.model.path)."
    )


def _exclude_with_head(exclude: Any, head: str) -> Any:
    """``exclude_modules`` + the value head (a regex string gets ``|head``; peft full-matches it)."""
    import re

    if exclude is None:
        return [head]
    if isinstance(exclude, str):
        return f"(?:{exclude})|{re.escape(head)}"
    return [*_target_modules(exclude), head]


def apply_value_lora(module: nn.Module, model_config: Any) -> nn.Module:
    """LoRA for the critic: wrap a HF token-classification value model (``num_labels=1``) in a peft model.

    The backbone's ``target_modules`` get frozen base weights + trainable ``lora_A [r, in]``,
    ``lora_B [out, r]``. The value head ``score [1, hidden]`` (+ bias) is freshly initialised, so it is
    excluded from LoRA and trained in full as a peft ``modules_to_save`` copy
    (``score.modules_to_save.default.*``; the frozen original stays as ``score.original_module.*``).
    ``task_type`` is ``TOKEN_CLS``, so ``PeftModel.from_pretrained(AutoModelForTokenClassification…, folder)``
    restores adapters and head from the ``lora_adapter/`` folder.

    Args:
        module: the HF ``*ForTokenClassification`` model, not yet FSDP-wrapped.
        model_config: ``critic.model`` (``lora_rank`` > 0, ``lora_alpha``, ``target_modules``,
            optional ``exclude_modules``, ``enable_gradient_checkpointing``).
    """
    from peft import TaskType, get_peft_model

    head = value_head_name(module)
    exclude = _exclude_with_head(model_config.get("exclude_modules"), head)
    lora_config = _lora_config(model_config, TaskType.TOKEN_CLS, exclude=exclude, modules_to_save=[head])
    _prepare_for_lora(module, model_config)
    return get_peft_model(module, lora_config)


def unwrap_peft(module: nn.Module) -> Any:
    """The ``PeftModel`` inside ``module`` (FSDP2 keeps the class; FSDP1 wraps it), or None."""
    for candidate in (module, getattr(module, "_fsdp_wrapped_module", None), getattr(module, "module", None)):
        if candidate is not None and hasattr(candidate, "peft_config") and hasattr(candidate, "disable_adapter"):
            return candidate
    return None


@contextlib.contextmanager
def disable_adapter(module: nn.Module) -> Iterator[None]:
    """Run ``module`` as its base model (adapters off); a no-op for a module without LoRA."""
    peft_model = unwrap_peft(module)
    if peft_model is None:
        yield
        return
    with peft_model.disable_adapter():
        yield


# ----------------------------------------------------------------------------- names and merging


def _clean(name: str) -> str:
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def is_lora_key(name: str) -> bool:
    """True for adapter entries (``...lora_A.default.weight``, ``lora_B``, ``lora_embedding_*``, ``lora_magnitude``)."""
    return ".lora_" in name


def is_adapter_key(name: str) -> bool:
    """True for what the adapter trains: LoRA entries and the trainable ``modules_to_save`` copy (value head)."""
    return is_lora_key(name) or _SAVED_COPY in name


def base_name(name: str) -> str:
    """peft name → base HF name: drop ``base_model.model.``, ``.base_layer`` and ``.modules_to_save.default``."""
    name = _clean(name)
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX) :]
    return name.replace(".base_layer.", ".").replace(_SAVED_COPY, ".")


def lora_scalings(module: nn.Module) -> dict[str, float]:
    """``{peft module path: scaling}`` of every LoRA layer of ``module`` (paths as in its state dict)."""
    from peft.tuners.lora import LoraLayer

    peft_model = unwrap_peft(module)
    if peft_model is None:
        return {}
    return {
        _clean(name): float(layer.scaling[_ADAPTER])
        for name, layer in peft_model.named_modules()
        if isinstance(layer, LoraLayer) and _ADAPTER in layer.scaling
    }


def _lora_parts(name: str) -> tuple[str, str] | None:
    """``(module path, 'A'|'B')`` of a ``<path>.lora_A.default.weight`` entry, else None."""
    for part in ("A", "B"):
        marker = f".lora_{part}.{_ADAPTER}.weight"
        if name.endswith(marker):
            return name[: -len(marker)], part
    return None


def merge_lora_tensors(
    named_tensors: Iterable[tuple[str, torch.Tensor]], scalings: Mapping[str, float] | float
) -> Iterator[tuple[str, torch.Tensor]]:
    """Stream peft ``(name, full tensor)`` pairs as base ``(name, tensor)`` pairs with the adapters merged.

    A LoRA linear ``path`` contributes ``path.base_layer.weight W [out, in]``, ``path.lora_A.default.weight
    A [r, in]`` and ``path.lora_B.default.weight B [out, r]``; it is emitted once all three were seen as
    ``path.weight = W + scaling[path] · B @ A`` (computed in fp32, cast back to W's dtype). A
    ``modules_to_save`` module (the critic's value head) is emitted from its trained copy; its frozen
    ``original_module`` is dropped. Other entries pass through renamed (:func:`base_name`).
    Memory: the pending tensors of one layer.

    Args:
        named_tensors: peft state-dict entries (e.g. ``iter_full_state_dict(peft_fsdp_module)``).
        scalings: ``lora_scalings(module)`` or one float for every layer (``lora_alpha / r``).
    """
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for raw_name, tensor in named_tensors:
        name = _clean(raw_name)
        if _FROZEN_COPY in name:
            continue  # the untrained original of a modules_to_save module; its trained copy is emitted
        parts = _lora_parts(name)
        if parts is None and is_lora_key(name):
            raise NotImplementedError(f"merging adapter entry {name!r} is not supported (only LoRA linear layers).")
        if parts is None and ".base_layer.weight" not in name:
            yield base_name(name), tensor
            continue
        path, part = parts if parts is not None else (name[: -len(".base_layer.weight")], "W")
        slot = pending.setdefault(path, {})
        slot[part] = tensor
        if len(slot) == 3:
            del pending[path]
            yield base_name(path) + ".weight", _merge_one(path, slot, scalings)
    if pending:
        raise ValueError(
            f"incomplete LoRA layers in the state dict (need base_layer, lora_A, lora_B): {sorted(pending)[:4]}"
        )


def _merge_one(path: str, slot: Mapping[str, torch.Tensor], scalings: Mapping[str, float] | float) -> torch.Tensor:
    """``W + s · B @ A`` for one layer (``W [out, in]``, ``A [r, in]``, ``B [out, r]``)."""
    scaling = scalings if isinstance(scalings, (int, float)) else scalings.get(path)
    if scaling is None:
        raise KeyError(f"no LoRA scaling known for layer {path!r}")
    weight = slot["W"]
    delta = slot["B"].float() @ slot["A"].float()
    return (weight.float() + float(scaling) * delta.to(weight.device)).to(weight.dtype)


def merged_state_dict(
    state_dict: Mapping[str, torch.Tensor], scalings: Mapping[str, float] | float
) -> dict[str, torch.Tensor]:
    """:func:`merge_lora_tensors` over a whole dict (model merger)."""
    return dict(merge_lora_tensors(state_dict.items(), scalings))


def base_model_tensors(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """peft state-dict entries → the frozen base model's ``(HF name, tensor)`` pairs; adapter entries dropped.

    What an engine with its own LoRA path loads once: ``path.base_layer.weight`` becomes ``path.weight``.
    """
    for name, tensor in named_tensors:
        if not is_lora_key(_clean(name)):
            yield base_name(name), tensor


# ----------------------------------------------------------------------------- adapter files


def lora_adapter_state_dict(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Adapter entries in peft's file naming, on CPU: ``...lora_A.weight`` (adapter name dropped) and a
    ``modules_to_save`` copy under its module's name (``base_model.model.score.weight``)."""
    out = {}
    for name, tensor in named_tensors:
        name = _clean(name)
        if is_adapter_key(name):
            file_name = name.replace(_SAVED_COPY, ".").replace(f".{_ADAPTER}.", ".")
            out[file_name] = tensor.detach().to("cpu", copy=True).contiguous()
    return out


def gather_lora_adapter(module: nn.Module) -> dict[str, torch.Tensor]:
    """Full adapter tensors of a (FSDP-wrapped) peft model on every rank (collective), peft file names.

    FSDP2 / plain: only the adapter DTensors are gathered; FSDP1 gathers the whole state dict first.
    """
    if fsdp_version(module) == 1:
        return lora_adapter_state_dict(iter_full_state_dict(module))
    return lora_adapter_state_dict(
        (name, _full_tensor(value)) for name, value in module.state_dict().items() if is_adapter_key(name)
    )


def save_lora_adapter(module: nn.Module, adapter_tensors: Mapping[str, torch.Tensor], target_dir: str) -> str:
    """Write ``adapter_config.json`` + ``adapter_model.safetensors`` (``PeftModel.from_pretrained`` reads them)."""
    from safetensors.torch import save_file

    peft_model = unwrap_peft(module)
    if peft_model is None:
        raise ValueError("save_lora_adapter: the module has no peft adapters.")
    os.makedirs(target_dir, exist_ok=True)
    peft_model.peft_config[_ADAPTER].save_pretrained(target_dir)
    save_file(dict(adapter_tensors), os.path.join(target_dir, "adapter_model.safetensors"))
    return target_dir


def read_adapter_scaling(adapter_dir: str) -> float:
    """``lora_alpha / r`` (``/ sqrt(r)`` with rsLoRA) from ``adapter_config.json``; rank/alpha patterns refused."""
    path = os.path.join(adapter_dir, "adapter_config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: a LoRA checkpoint needs its lora_adapter/ folder to be merged.")
    with open(path) as f:
        config = json.load(f)
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise NotImplementedError(f"{path}: per-layer rank_pattern/alpha_pattern is not supported by the merger.")
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def adapter_module_path(file_name: str) -> str:
    """peft file name of an adapter entry → its module path (the key of :func:`lora_scalings`).

    ``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`` → ``base_model.model.model.layers.0.self_attn.q_proj``.
    """
    for part in ("A", "B"):
        marker = f".lora_{part}.weight"
        if file_name.endswith(marker):
            return file_name[: -len(marker)]
    raise ValueError(f"{file_name!r} is not a LoRA linear adapter entry (…lora_A.weight / …lora_B.weight).")


def scaled_adapter_tensors(
    adapter_tensors: Mapping[str, torch.Tensor], scalings: Mapping[str, float], dtype: torch.dtype
) -> Iterator[tuple[str, torch.Tensor]]:
    """What a LoRA engine computes with: ``A [r, in]`` cast to ``dtype`` and ``scaling · B [out, r]``
    (B cast to ``dtype`` first, then scaled in it, as vLLM folds the scaling into B).

    Args:
        adapter_tensors: peft file names (:func:`gather_lora_adapter`).
        scalings: :func:`lora_scalings` of the peft model.
        dtype: the engine's LoRA dtype.
    """
    for name, tensor in adapter_tensors.items():
        value = tensor.to(dtype)
        if name.endswith(".lora_B.weight"):
            path = adapter_module_path(name)
            if path not in scalings:
                raise KeyError(f"no LoRA scaling known for layer {path!r}")
            value = value * scalings[path]
        yield name, value


def peft_adapter_config(module: nn.Module) -> Any:
    """The peft ``LoraConfig`` of ``module``'s adapter (``save_pretrained(folder)`` writes ``adapter_config.json``)."""
    peft_model = unwrap_peft(module)
    if peft_model is None:
        raise ValueError("peft_adapter_config: the module has no peft adapters.")
    return peft_model.peft_config[_ADAPTER]
