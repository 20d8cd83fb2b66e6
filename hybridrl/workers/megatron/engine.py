"""The Megatron engine of one rank: the model (+ megatron-core DDP), its HF weights in and out, and its optimizer.

    build_megatron_model  HF folder → GPTModel (TP/PP shard of this rank) → weights via mbridge or the built-in
                          converter (or a megatron-core dist checkpoint) → (trainable) megatron-core
                          DistributedDataParallel → MegatronCausalLM view
    export_hf_weights     (HF name, full tensor) on every rank: weight sync to the rollout engine, HF export
    build_megatron_optimizer / build_megatron_lr_scheduler   megatron-core's optimizer over the DDP buffers
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from hybridrl.workers.megatron import weights
from hybridrl.workers.megatron.model import (
    MegatronCausalLM,
    MegatronValueModel,
    build_gpt_model,
    transformer_config,
    trunk_of,
)

__all__ = ["MegatronModel", "build_megatron_lr_scheduler", "build_megatron_model", "build_megatron_optimizer",
           "export_hf_weights"]


@dataclass
class MegatronModel:
    """One rank's model. ``gpt``: the bare ``GPTModel``; ``ddp``: megatron-core DDP around it (trainable only);
    ``causal_lm``: the HF-style view the actor calls (a value model's: :class:`MegatronValueModel`, values
    ``[B, S, 1]``); ``bridge``: the mbridge ``Bridge`` (``use_mbridge``)."""

    gpt: nn.Module
    ddp: nn.Module | None
    causal_lm: MegatronCausalLM
    hf_config: Any
    config: Any  # megatron-core TransformerConfig
    bridge: Any = None


def build_megatron_model(model_path: str, hf_config: Any, megatron_config: Any, dtype: torch.dtype,
                         device_name: str, *, trainable: bool = False,
                         value_head: dict[str, torch.Tensor] | None = None,
                         section: str = "actor_rollout_ref.actor.megatron") -> MegatronModel:
    """This rank's model with the HF weights of ``model_path`` (call :func:`init_megatron_parallel` first).

    ``megatron_config``: an ``actor_rollout_ref.actor.megatron``-shaped section (parallel sizes,
    ``use_mbridge``, ``use_distributed_optimizer``, ``override_transformer_config``); with
    ``use_dist_checkpointing`` the weights come from the megatron-core dist checkpoint ``dist_checkpointing_path``
    instead (:mod:`hybridrl.workers.megatron.dist_checkpoint`; ``section``, its dotted path, names it in errors).
    ``value_head``: an HF ``score`` head (``{"weight": [1, H], "bias": [1]}``) → a value model (critic, reward
    model): the trunk's weights from ``model_path``, this head, and a :class:`MegatronValueModel` view.
    """
    _refuse_unsupported_layout(megatron_config, device_name, value_head is not None)
    config = transformer_config(hf_config, megatron_config, dtype, device_name)
    gpt = build_gpt_model(hf_config, config, device_name, value_head=value_head is not None)
    converted = gpt if value_head is None else trunk_of(gpt)  # the value head is not in the causal-LM layout
    bridge = None
    if bool(megatron_config.use_mbridge):
        from hybridrl.workers.megatron.bridge import build_bridge, load_hf_weights_mbridge

        bridge = build_bridge(hf_config, dtype)  # also exports the weights (rollout sync, HF checkpoints)
    if bool(megatron_config.use_dist_checkpointing):
        from hybridrl.workers.megatron.dist_checkpoint import load_dist_checkpoint_weights

        load_dist_checkpoint_weights(gpt, megatron_config.dist_checkpointing_path,
                                     f"{section}.dist_checkpointing_path", value_model=value_head is not None)
    elif bridge is not None:
        load_hf_weights_mbridge(bridge, converted, model_path)
    else:
        weights.load_hf_weights(converted, weights.read_hf_state_dict(model_path), hf_config)
    if value_head is not None:
        gpt.output_layer.load_hf(value_head)
    ddp = _wrap_ddp(gpt, config, megatron_config) if trainable else None
    view = ddp if ddp is not None else gpt
    causal_lm = (MegatronCausalLM(view, hf_config.vocab_size, post_process=bool(gpt.post_process))
                 if value_head is None else MegatronValueModel(view))
    if not trainable:
        causal_lm.requires_grad_(False)
    return MegatronModel(gpt, ddp, causal_lm, hf_config, config, bridge)


def _refuse_unsupported_layout(megatron_config: Any, device_name: str, value_model: bool) -> None:
    """NotImplementedError for the layouts that cannot run: CP > 1 on CPU (megatron-core's context parallelism needs
    TransformerEngine's attention; the local spec's ``DotProductAttention`` asserts ``context_parallel_size == 1``;
    on GPU it is written, :mod:`hybridrl.workers.megatron.context_parallel`, but has never run), and PP > 1 with
    mbridge or for a value model (PP is built for the policy with the built-in converter)."""
    if int(megatron_config.context_parallel_size) > 1 and device_name != "cuda":
        raise NotImplementedError(
            "strategy=megatron: context_parallel_size > 1 needs the GPU (megatron-core's context parallelism runs "
            "only in TransformerEngine attention, which cannot run on CPU); set it to 1 on CPU."
        )
    if int(megatron_config.pipeline_model_parallel_size) > 1 and (value_model or bool(megatron_config.use_mbridge)):
        raise NotImplementedError(
            "strategy=megatron: pipeline_model_parallel_size > 1 is built for the policy (actor / reference) with "
            "the built-in converter only; set use_mbridge=False, and pipeline_model_parallel_size=1 for the critic "
            "and reward model."
        )


def _wrap_ddp(gpt: nn.Module, config: Any, megatron_config: Any) -> nn.Module:
    """megatron-core DDP: gradients accumulate in fp32 buffers and are averaged over the DP group."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=False,
        use_distributed_optimizer=bool(megatron_config.use_distributed_optimizer),
    )
    return DistributedDataParallel(config=config, ddp_config=ddp_config, module=gpt)


def export_hf_weights(model: MegatronModel) -> Iterator[tuple[str, torch.Tensor]]:
    """``(HF name, full tensor)`` pairs of the current weights on every rank (collective over TP)."""
    if model.bridge is not None:
        from hybridrl.workers.megatron.bridge import iter_hf_weights_mbridge

        yield from iter_hf_weights_mbridge(model.bridge, model.gpt)
    else:
        yield from weights.iter_hf_weights(model.gpt, model.hf_config)


def build_megatron_optimizer(model: MegatronModel, optim_config: Any, megatron_config: Any) -> Any:
    """megatron-core's optimizer (Adam = torch ``AdamW`` without TE/apex) from the ``actor.optim`` section.

    ``optim.clip_grad`` clips inside ``step()``. megatron-core exempts biases and 1-D parameters (norms) from
    weight decay (verl's Megatron actor does the same); FSDP's AdamW decays every parameter.
    """
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    if model.ddp is None:
        raise ValueError("build_megatron_optimizer needs a model built with trainable=True")
    config = OptimizerConfig(
        optimizer=str(optim_config.optimizer),
        lr=float(optim_config.lr),
        min_lr=float(optim_config.min_lr),
        weight_decay=float(optim_config.weight_decay),
        clip_grad=float(optim_config.clip_grad),
        bf16=model.config.bf16,
        params_dtype=model.config.params_dtype,
        use_distributed_optimizer=bool(megatron_config.use_distributed_optimizer),
    )
    return get_megatron_optimizer(config, [model.ddp])


def _torch_optimizers(megatron_optimizer: Any) -> list[torch.optim.Optimizer]:
    """The torch optimizers inside a megatron-core optimizer (a ``ChainedOptimizer`` holds several)."""
    chained = getattr(megatron_optimizer, "chained_optimizers", None) or [megatron_optimizer]
    return [inner.optimizer for inner in chained]


def build_megatron_lr_scheduler(megatron_optimizer: Any, optim_config: Any, total_training_steps: int) -> Any:
    """verl's Megatron LR schedule: linear warmup from ``lr_warmup_init`` to ``lr`` over ``lr_warmup_steps``
    (null: ``lr_warmup_steps_ratio`` × total steps), then ``lr_decay_style`` (constant | linear | cosine) to
    ``min_lr`` over ``lr_decay_steps`` (null: the total steps). One ``step()`` per optimizer step."""
    lr, min_lr = float(optim_config.lr), float(optim_config.min_lr)
    warmup = optim_config.lr_warmup_steps
    if warmup is None or warmup <= 0:
        warmup = optim_config.lr_warmup_steps_ratio * total_training_steps
    warmup = int(warmup)
    decay_steps = int(optim_config.lr_decay_steps or total_training_steps)
    style, init = str(optim_config.lr_decay_style), float(optim_config.lr_warmup_init)
    if style not in ("constant", "linear", "cosine"):
        raise ValueError(f"actor_rollout_ref.actor.optim.lr_decay_style={style!r}: use constant, linear or cosine")

    def lr_at(step: int) -> float:
        if warmup > 0 and step < warmup:
            return init + (lr - init) * step / warmup
        if style == "constant" or decay_steps <= warmup:
            return lr
        progress = min(1.0, (step - warmup) / (decay_steps - warmup))
        coefficient = 1.0 - progress if style == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return min_lr + (lr - min_lr) * coefficient

    schedulers = [LambdaLR(inner, lambda step: lr_at(step) / lr) for inner in _torch_optimizers(megatron_optimizer)]
    return schedulers[0] if len(schedulers) == 1 else _SchedulerGroup(schedulers)


class _SchedulerGroup:
    """Steps several LR schedulers together (a ``ChainedOptimizer``'s torch optimizers)."""

    def __init__(self, schedulers: list[LambdaLR]) -> None:
        self.schedulers = schedulers

    def step(self) -> None:
        for scheduler in self.schedulers:
            scheduler.step()

    def get_last_lr(self) -> list[float]:
        return self.schedulers[0].get_last_lr()
