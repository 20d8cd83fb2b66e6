"""Hooks on the top-k routers of Hugging Face mixture-of-experts models: capture and replay routing.

transformers (5.x) gives each sparse MoE block a router module (``Qwen3MoeTopKRouter``, ``GptOssTopKRouter``,
``MixtralTopKRouter``) whose forward maps ``hidden [T, H]`` to ``(router_logits [T, E], scores [T, k],
indices [T, k])``; the experts then mix their outputs with ``scores``. One context,
:func:`capture_routing`, registers forward hooks on every router (in layer order) and on the model itself:

- capture: each router call's chosen ``indices [T, k]``, and with ``aux_loss`` the model output's load-balancing
  ``aux_loss`` (``output_router_logits=True`` is passed to the model's forward for the call);
- replay: the router's ``indices`` are replaced by given ones and ``scores`` recomputed from the router's own
  logits at those experts, so gradients still reach the router weights (routing replay, R3).

Which model types have routers these hooks understand is the model registry's ``router_replay`` path
(:mod:`hybridrl.models.families`).

Notation:
    T: tokens of one forward (B*S padded, nnz packed), H: hidden size, E: experts, k: experts per token,
    L: MoE layers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = ["ROUTED_EXPERTS_KEY", "RoutingCapture", "capture_routing", "num_experts_of", "router_modules"]

# batch key of a rollout's routing record, [B, S, L, k] expert ids per token of input_ids (verl 0.9's name)
ROUTED_EXPERTS_KEY = "routed_experts"

# router classes whose top-k weights are a softmax over the k chosen logits (not over all experts)
_SOFTMAX_OVER_TOP_K = frozenset({"GptOssTopKRouter"})


def router_modules(model: nn.Module) -> list[nn.Module]:
    """The top-k router modules of ``model``, in layer order (empty for a dense model)."""
    return [module for module in model.modules() if type(module).__name__.endswith("TopKRouter")]


def num_experts_of(model: nn.Module) -> int | None:
    """Routed experts per MoE layer (``E``), read from the first router; None for a dense model."""
    routers = router_modules(model)
    return int(routers[0].num_experts) if routers else None


def replay_scores(router: nn.Module, router_logits: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The mixing weights ``[T, k]`` the router would give ``indices [T, k]``, differentiable in the logits.

    Qwen3-MoE / Mixtral:  w_j = p_{i_j} / Σ_j p_{i_j} (renormalised when ``norm_topk_prob``), p = softmax(logits)
    GPT-OSS:              w = softmax(logits_{i_1..i_k})
    """
    if type(router).__name__ in _SOFTMAX_OVER_TOP_K:
        chosen = router_logits.gather(-1, indices)
        return torch.softmax(chosen, dim=1, dtype=chosen.dtype)
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float)
    chosen = probs.gather(-1, indices)
    if getattr(router, "norm_topk_prob", True):
        chosen = chosen / chosen.sum(dim=-1, keepdim=True)
    return chosen.to(router_logits.dtype)


@dataclass
class RoutingCapture:
    """What the hooks saw during one context.

    ``expert_ids[c][l]``: call ``c`` of the model, layer ``l``: ``[T_c, k]`` chosen experts (after replay).
    ``token_masks[c]``: ``[T_c]`` bool, the tokens the call's ``attention_mask`` marks valid (all when it had none).
    ``aux_losses[c]``: the model output's ``aux_loss`` of call ``c`` (scalar, with grad), when asked for.
    """

    expert_ids: list[list[torch.Tensor]] = field(default_factory=list)
    token_masks: list[torch.Tensor | None] = field(default_factory=list)
    aux_losses: list[torch.Tensor] = field(default_factory=list)

    def aux_loss(self) -> torch.Tensor | None:
        """The mean of the calls' aux losses (one call in the plain forwards); None when none was recorded."""
        return torch.stack(self.aux_losses).mean() if self.aux_losses else None

    def valid_expert_ids(self) -> torch.Tensor | None:
        """Chosen experts of every valid token of every call: ``[N, L, k]``; None when nothing was captured."""
        rows = []
        for layers, mask in zip(self.expert_ids, self.token_masks):
            if not layers:
                continue
            stacked = torch.stack(layers, dim=1)  # [T, L, k]
            rows.append(stacked if mask is None else stacked[mask.to(stacked.device)])
        return torch.cat(rows) if rows else None


def _root_pre_hook(capture: RoutingCapture, aux_loss: bool) -> Callable[..., Any]:
    def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        mask = kwargs.get("attention_mask")
        capture.token_masks.append(None if mask is None or mask.dim() != 2 else mask.reshape(-1).bool())
        capture.expert_ids.append([])
        if aux_loss:
            kwargs = {**kwargs, "output_router_logits": True}
        return args, kwargs

    return hook


def _root_hook(capture: RoutingCapture) -> Callable[..., None]:
    def hook(module: nn.Module, args: tuple, output: Any) -> None:
        aux = getattr(output, "aux_loss", None)
        if aux is not None:
            capture.aux_losses.append(aux)

    return hook


def _router_hook(capture: RoutingCapture, layer: int, replay: Callable[[int, int], torch.Tensor] | None):
    def hook(router: nn.Module, args: tuple, output: tuple) -> tuple | None:
        router_logits, scores, indices = output
        if replay is not None:
            indices = replay(layer, router_logits.shape[0]).to(device=indices.device, dtype=indices.dtype)
            scores = replay_scores(router, router_logits, indices)
        if capture.expert_ids:
            capture.expert_ids[-1].append(indices.detach())
        return (router_logits, scores, indices) if replay is not None else None

    return hook


@contextlib.contextmanager
def capture_routing(
    model: nn.Module, *, aux_loss: bool = False, replay: Callable[[int, int], torch.Tensor] | None = None
) -> Iterator[RoutingCapture]:
    """Hook ``model``'s routers for the duration of the context; yields the :class:`RoutingCapture`.

    Args:
        model: an HF MoE causal LM (plain or FSDP2-wrapped: the hooks sit on the module objects).
        aux_loss: pass ``output_router_logits=True`` to the model's forward and keep the output's ``aux_loss``.
        replay: ``replay(layer, num_tokens) -> indices [T, k]``: the experts layer ``layer`` must use for the
            ``num_tokens`` tokens of the current call; None routes freely.
    """
    capture = RoutingCapture()
    routers = router_modules(model)
    if not routers:
        raise ValueError(f"{type(model).__name__} has no top-k router modules: it is not a mixture-of-experts model")
    handles = [
        model.register_forward_pre_hook(_root_pre_hook(capture, aux_loss), with_kwargs=True),
        model.register_forward_hook(_root_hook(capture)),
    ]
    handles += [router.register_forward_hook(_router_hook(capture, i, replay)) for i, router in enumerate(routers)]
    try:
        yield capture
    finally:
        for handle in handles:
            handle.remove()
