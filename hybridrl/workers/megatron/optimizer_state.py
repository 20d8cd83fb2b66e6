"""A megatron-core optimizer's state as tensors keyed by parameter name + JSON (no pickle), and back.

megatron-core wraps torch optimizers (``ChainedOptimizer`` → ``FP32Optimizer`` / ``Float16OptimizerWithFloat16Params``
/ ``DistributedOptimizer``); the torch optimizer's parameters are the model's parameters (fp32), fp32 main copies of
bf16 parameters, or this DP rank's shard of them (distributed optimizer). Each is named by the model parameter it
belongs to. Tensors (``{name}::param`` the main parameter, ``{name}::{key}`` e.g. ``exp_avg``, ``exp_avg_sq``,
``step``); JSON: every param group's scalar settings (``lr``, ``betas``, ...) and non-tensor state values.

Saving the main parameters makes a bf16 resume exact (the fp32 masters are not the bf16 weights); with fp32 they
equal (or view) the model's weights. Resume needs the same parallel layout (the shard of each rank is its own).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["load_optimizer_state", "optimizer_state"]

_SEP = "::"
# (model-parameter groups, main-parameter groups) attribute pairs of megatron-core's optimizer classes
_GROUP_PAIRS = (
    ("float16_groups", "fp32_from_float16_groups"),  # Float16OptimizerWithFloat16Params
    ("fp32_from_fp32_groups", "fp32_from_fp32_groups"),
    ("model_float16_groups", "shard_fp32_from_float16_groups"),  # DistributedOptimizer
    ("model_fp32_groups", "shard_fp32_groups"),
)


def _inner_optimizers(megatron_optimizer: Any) -> list[Any]:
    return list(getattr(megatron_optimizer, "chained_optimizers", None) or [megatron_optimizer])


def _main_param_names(inner: Any, model_names: dict[int, str]) -> dict[int, str]:
    """``id(main parameter) → model parameter name`` for one megatron-core optimizer."""
    names = dict(model_names)  # FP32Optimizer steps the model's parameters themselves
    for model_attr, main_attr in _GROUP_PAIRS:
        model_groups, main_groups = getattr(inner, model_attr, None), getattr(inner, main_attr, None)
        if model_groups is None or main_groups is None:
            continue
        for model_group, main_group in zip(model_groups, main_groups):
            for model_param, main_param in zip(model_group, main_group):
                names[id(main_param)] = model_names[id(model_param)]
    return names


def _named_main_params(megatron_optimizer: Any, model: nn.Module) -> Iterator[tuple[str, Any, dict, torch.Tensor]]:
    """``(model parameter name, torch optimizer, its param group, main parameter)`` for every stepped tensor."""
    model_names = {id(param): name for name, param in model.named_parameters()}
    for inner in _inner_optimizers(megatron_optimizer):
        names = _main_param_names(inner, model_names)
        for group in inner.optimizer.param_groups:
            for param in group["params"]:
                if id(param) not in names:
                    raise RuntimeError(f"a parameter of {type(inner).__name__} ({tuple(param.shape)}) has no model name")
                yield names[id(param)], inner.optimizer, group, param


def _scalar_settings(group: dict) -> dict[str, Any]:
    """The JSON-able settings of a param group (``lr``, ``betas``, ``weight_decay``, ...; not ``params``)."""
    plain = (bool, int, float, str, type(None))
    return {key: list(value) if isinstance(value, tuple) else value for key, value in group.items()
            if key != "params" and (isinstance(value, plain) or (isinstance(value, tuple)
                                                                 and all(isinstance(v, plain) for v in value)))}


def optimizer_state(megatron_optimizer: Any, model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(tensors, meta)`` of this rank's optimizer state; ``model`` is the bare ``GPTModel`` (parameter names)."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for name, torch_optimizer, _group, param in _named_main_params(megatron_optimizer, model):
        tensors[f"{name}{_SEP}param"] = param.detach()
        for key, value in torch_optimizer.state.get(param, {}).items():
            if isinstance(value, torch.Tensor):
                tensors[f"{name}{_SEP}{key}"] = value
            else:
                scalars[f"{name}{_SEP}{key}"] = value
    groups = [[_scalar_settings(group) for group in inner.optimizer.param_groups]
              for inner in _inner_optimizers(megatron_optimizer)]
    return tensors, {"param_groups": groups, "state_scalars": scalars}


def _check_shape(key: str, saved: torch.Tensor, current: torch.Tensor, source: str) -> None:
    if saved.shape != current.shape:
        raise ValueError(f"{source}: {key} has shape {tuple(saved.shape)}, this rank's optimizer "
                         f"{tuple(current.shape)}; resume with the parallel layout the checkpoint was saved with.")


def _by_parameter(tensors: dict[str, torch.Tensor], scalars: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{name: {state key: value}}`` from the flat ``{name}::{key}`` entries."""
    grouped: dict[str, dict[str, Any]] = {}
    for flat in (tensors, scalars):
        for full_key, value in flat.items():
            name, key = full_key.rsplit(_SEP, 1)
            grouped.setdefault(name, {})[key] = value
    return grouped


@torch.no_grad()
def load_optimizer_state(megatron_optimizer: Any, model: nn.Module, tensors: dict[str, torch.Tensor],
                         meta: dict[str, Any], source: str) -> None:
    """Restore :func:`optimizer_state`'s output (``source``: the file, for error messages)."""
    saved = _by_parameter(tensors, meta["state_scalars"])
    for name, torch_optimizer, group, param in _named_main_params(megatron_optimizer, model):
        state = dict(saved.get(name, {}))
        if "param" not in state:
            raise KeyError(f"{source} has no {name + _SEP}param: it was saved from another model or layout")
        main = state.pop("param")
        _check_shape(f"{name}{_SEP}param", main, param, source)
        param.copy_(main)
        on_device = bool(group.get("capturable")) or bool(group.get("fused"))
        for key, value in state.items():  # torch keeps Adam's scalar step on the CPU unless capturable/fused
            if isinstance(value, torch.Tensor) and (value.dim() > 0 or on_device):
                state[key] = value.to(param.device)
        if state:
            torch_optimizer.state[param] = state
    _restore_param_groups(megatron_optimizer, meta["param_groups"], source)


def _restore_param_groups(megatron_optimizer: Any, saved_groups: list[list[dict]], source: str) -> None:
    inners = _inner_optimizers(megatron_optimizer)
    shapes = [len(inner.optimizer.param_groups) for inner in inners]
    if [len(groups) for groups in saved_groups] != shapes:
        raise ValueError(f"{source}: {[len(g) for g in saved_groups]} param groups saved, the optimizer has {shapes}")
    for inner, groups in zip(inners, saved_groups):
        for group, saved in zip(inner.optimizer.param_groups, groups):
            for key, value in saved.items():
                if key in group:
                    group[key] = tuple(value) if isinstance(group[key], tuple) else value
