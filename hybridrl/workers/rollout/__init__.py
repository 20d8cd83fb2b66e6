"""Rollout engines (``rollout.name``): ``hf`` (fast KV-cache loop), ``hf_generate``, ``vllm``, ``sglang``.

``build_rollout`` builds the engine named by ``rollout.name``; the hybrid engine
(``hybridrl.workers.sharding_manager.build_rollout_handle``, what ``ActorRolloutRefWorker.init_model``
calls) wraps it in the ``RolloutHandle`` that keeps it in sync with the actor. This package never
imports the sharding manager. Engines are registered by name in ``ROLLOUT_REGISTRY``; vllm and sglang
are imported only when selected (they are optional extras).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from hybridrl.generation import SamplingParams, collect_eos_token_ids, resolve_sampling_params
from hybridrl.workers.rollout.base import BaseRollout

RolloutBuilder = Callable[..., BaseRollout]
ROLLOUT_REGISTRY: dict[str, RolloutBuilder] = {}


def register_rollout(name: str) -> Callable[[RolloutBuilder], RolloutBuilder]:
    """Decorator: register ``builder(rollout_config, model_config, *, tokenizer, hf_config, actor_module,
    device_name, eos_token_ids, pad_token_id) -> BaseRollout`` under ``rollout.name``."""

    def wrap(builder: RolloutBuilder) -> RolloutBuilder:
        ROLLOUT_REGISTRY[name] = builder
        return builder

    return wrap


@register_rollout("hf")
def _build_hf(rollout_config: Any, model_config: Any, **kw: Any) -> BaseRollout:
    from hybridrl.workers.rollout.hf_rollout import HFRollout, build_hf_engine_model

    return HFRollout(build_hf_engine_model(rollout_config, model_config, **kw), rollout_config, **_engine_kw(kw))


@register_rollout("hf_generate")
def _build_hf_generate(rollout_config: Any, model_config: Any, **kw: Any) -> BaseRollout:
    from hybridrl.workers.rollout.hf_rollout import HFGenerateRollout, build_hf_engine_model

    model = build_hf_engine_model(rollout_config, model_config, **kw)
    return HFGenerateRollout(model, rollout_config, **_engine_kw(kw))


@register_rollout("vllm")
def _build_vllm(rollout_config: Any, model_config: Any, **kw: Any) -> BaseRollout:
    from hybridrl.workers.rollout.vllm_rollout import VLLMRollout

    return VLLMRollout(rollout_config, model_config, **kw)


@register_rollout("sglang")
def _build_sglang(rollout_config: Any, model_config: Any, **kw: Any) -> BaseRollout:
    from hybridrl.workers.rollout.sglang_rollout import SGLangRollout

    return SGLangRollout(rollout_config, model_config, **kw)


def _engine_kw(kw: dict[str, Any]) -> dict[str, Any]:
    return {"eos_token_ids": kw["eos_token_ids"], "pad_token_id": kw["pad_token_id"], "seed": kw["seed"]}


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else int(os.environ.get("RANK", 0))


def _generation_config(model_path: str | None) -> Any:
    if not model_path:
        return None
    try:
        from transformers import GenerationConfig

        return GenerationConfig.from_pretrained(os.path.expanduser(model_path))
    except (OSError, ValueError):  # no generation_config.json: the tokenizer's EOS is enough
        return None


def build_rollout(
    rollout_config: Any, model_config: Any, *, tokenizer: Any, hf_config: Any, actor_module: Any, device_name: str
) -> BaseRollout:
    """Build the engine named by ``rollout.name`` (EOS/pad ids from the tokenizer, seed offset by rank).

    Args:
        rollout_config: ``actor_rollout_ref.rollout``, filled (every key of the YAML: the worker's section, or
            :func:`~hybridrl.utils.config_defaults.section_with_defaults` of one built by hand).
        model_config: ``actor_rollout_ref.model`` (``path``, ``trust_remote_code``, ...), filled too.
        tokenizer: the actor's tokenizer (EOS / pad ids).
        hf_config: the actor's HF config (with ``override_config`` applied).
        actor_module: the FSDP-wrapped or plain training module to follow; None: the engine loads
            ``model.path`` itself and never syncs (offline generation).
        device_name: ``cpu`` or ``cuda``.
    """
    name = rollout_config.name
    if name not in ROLLOUT_REGISTRY:
        raise ValueError(
            f"actor_rollout_ref.rollout.name={name!r} is not a rollout engine; choose one of "
            f"{sorted(ROLLOUT_REGISTRY)} (on CPU: rollout.name=hf)"
        )
    eos_ids = collect_eos_token_ids(tokenizer, _generation_config(model_config.get("path")))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    return ROLLOUT_REGISTRY[name](
        rollout_config,
        model_config,
        tokenizer=tokenizer,
        hf_config=hf_config,
        actor_module=actor_module,
        device_name=device_name,
        eos_token_ids=eos_ids,
        pad_token_id=pad_id,
        seed=int(rollout_config.seed) + _rank(),
    )


__all__ = [
    "ROLLOUT_REGISTRY",
    "BaseRollout",
    "SamplingParams",
    "build_rollout",
    "collect_eos_token_ids",
    "register_rollout",
    "resolve_sampling_params",
]
