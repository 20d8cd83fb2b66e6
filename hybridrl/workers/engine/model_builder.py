"""A worker's model: where it comes from (``ModelSpec``) and how it is loaded and wrapped (``build_fsdp_module``).

    ModelSpec(model section, fsdp_config, strategy, kind, trainable, sp_group)
      ──► external libs imported ──► HF model loaded in the resolved dtype (Ulysses attention when SP)
      ──► gradient checkpointing / LoRA adapters (trainable models) ──► FSDP2 (or FSDP1) wrap

The actor, reference, critic and reward-model workers all build their model here.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from hybridrl.models.families import FastPath, model_type_of, supports
from hybridrl.models.transformers.ulysses_attention import register_ulysses_attention
from hybridrl.utils import ulysses
from hybridrl.utils.device import current_device
from hybridrl.utils.import_utils import import_external_libs
from hybridrl.workers.engine.fsdp import apply_fsdp, enable_gradient_checkpointing
from hybridrl.workers.engine.lora import apply_lora, apply_value_lora, lora_enabled
from hybridrl.workers.engine.model_loader import load_hf_model
from hybridrl.workers.engine.precision import resolve_model_dtype

__all__ = ["ModelSpec", "build_fsdp_module"]


class ModelSpec:
    """Where a worker's model comes from and how it is wrapped (read from a verl config section).

    Args:
        model_config: ``*.model`` (``path``, ``override_config``, ``trust_remote_code``, ``external_lib``,
            ``enable_gradient_checkpointing``).
        fsdp_config: the matching ``fsdp_config`` section.
        strategy: ``fsdp2`` (default) or ``fsdp``.
        kind: ``causal_lm`` or ``token_classification``.
        trainable: actor/critic (fp32 master weights, gradient checkpointing) vs ref/RM.
        sp_group: the Ulysses sequence-parallel group (None: no sequence parallelism).
    """

    def __init__(
        self, model_config: Any, fsdp_config: Any, strategy: str, kind: str, trainable: bool, sp_group: Any = None
    ) -> None:
        self.model_config = model_config
        self.fsdp_config = fsdp_config
        self.strategy = strategy or "fsdp2"
        self.kind = kind
        self.trainable = trainable
        self.sp_group = sp_group  # Ulysses SP group: attention runs as ulysses_sdpa (models.transformers)


def build_fsdp_module(spec: ModelSpec, device_name: str) -> tuple[nn.Module, Any]:
    """Load the HF model, optionally enable gradient checkpointing, shard it. Returns ``(module, hf_config)``."""
    model_config = spec.model_config
    import_external_libs(model_config.get("external_lib"))
    dtype = resolve_model_dtype(spec.fsdp_config, trainable=spec.trainable, device_name=device_name)
    attn_implementation = None
    if spec.sp_group is not None:
        attn_implementation = register_ulysses_attention()
    module, hf_config = load_hf_model(
        model_config.path,
        kind=spec.kind,
        torch_dtype=dtype,
        override_config=dict(model_config.get("override_config") or {}),
        trust_remote_code=bool(model_config.trust_remote_code),
        attn_implementation=attn_implementation,
    )
    if spec.sp_group is not None and not supports(module, FastPath.ULYSSES):
        raise ValueError(
            f"ulysses_sequence_parallel_size > 1 needs a model family the registry lists for Ulysses attention "
            f"(hybridrl.models.families); model_type={model_type_of(module)!r} is not one: set "
            f"ulysses_sequence_parallel_size=1."
        )
    if spec.trainable and model_config.enable_gradient_checkpointing:
        enable_gradient_checkpointing(module)
    if spec.trainable and lora_enabled(model_config):
        module = _apply_lora(module, spec)
    if device_name == "cuda":
        module.to(current_device())
    # verl: frozen FSDP1 models (ref, RM) keep their params offloaded to CPU between uses on GPU
    param_offload = (not spec.trainable) and spec.strategy == "fsdp" and device_name == "cuda"
    wrapped = apply_fsdp(module, spec.fsdp_config, strategy=spec.strategy, param_offload=param_offload)
    if spec.sp_group is not None:
        ulysses.mark_sequence_parallel(wrapped, spec.sp_group)
    return wrapped, hf_config


_LORA_STRATEGY_KEYS = {"causal_lm": ("actor", "actor_rollout_ref.actor"), "token_classification": ("critic", "critic")}


def _apply_lora(module: nn.Module, spec: ModelSpec) -> nn.Module:
    """Adapters before FSDP (verl), base weights frozen: the actor's causal LM, or the critic's value model
    (whose fresh value head is trained in full). FSDP2 only."""
    role, prefix = _LORA_STRATEGY_KEYS[spec.kind]
    if spec.strategy != "fsdp2":
        raise ValueError(
            f"model.lora_rank > 0 needs {role}.strategy=fsdp2 (got {spec.strategy!r}): FSDP1 cannot mix frozen "
            f"base weights and trainable adapters in one FlatParameter here; set {prefix}.strategy=fsdp2."
        )
    if spec.kind == "causal_lm":
        return apply_lora(module, spec.model_config)
    return apply_value_lora(module, spec.model_config)
