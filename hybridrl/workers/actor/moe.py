"""Mixture-of-experts parts of the actor: the router auxiliary loss, expert-load metrics, routing replay (R3).

    policy_loss += router_aux_loss_coef · aux_loss        (``actor.use_router_aux_loss``; coef from the HF config)
    aux_loss     = the HF model's load-balancing loss (Switch Transformer eq. 4) over the forward's valid tokens

Expert-load metrics (``actor/moe/{max,min,avg}_vio/...``, :mod:`hybridrl.algos.moe_load`) count the experts the
training forward routed each valid token to, on every ``moe_load_balance_metrics_interval``-th update.

Routing replay (``actor.router_replay.mode=R3``): the batch's ``routed_experts [B, S, L, k]`` (the experts the
rollout chose for every token of ``input_ids [B, S]``) are forced on the routers in the log-prob and update
forwards; the padded and the packed layouts select the same tokens the forward runs (:func:`replay_targets`).

Notation: B micro-batch rows, S = P + R tokens per row, L MoE layers, k experts per token, T tokens of a forward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from hybridrl.algos.moe_load import expert_load_counts, load_balance_metrics
from hybridrl.models.families import FastPath, model_type_of, model_types_for, supports
from hybridrl.models.transformers.moe_router import (
    ROUTED_EXPERTS_KEY,
    RoutingCapture,
    capture_routing,
    num_experts_of,
)
from hybridrl.workers.actor.forward import skipped_columns

__all__ = ["ROUTED_EXPERTS_KEY", "ActorMoE", "replay_targets"]

AUX_LOSS_METRIC = "actor/aux_loss"
LOAD_METRICS_PREFIX = "actor/moe"
_REPLAY_MODES = ("disabled", "R3")


def replay_targets(
    routed_experts: torch.Tensor, attention_mask: torch.Tensor, response_length: int, packed: bool
) -> torch.Tensor:
    """The routing record in the token order of the actor's forward: ``[T, L, k]``.

    Args:
        routed_experts: ``[B, S, L, k]`` experts per token of ``input_ids``.
        attention_mask: ``[B, S]``.
        response_length: ``R``.
        packed: the packed layout (valid tokens row-major, ``T = nnz``); else the padded one, whose forward skips
            the all-padding leading and trailing columns (``T = B · S'``).
    """
    if packed:
        return routed_experts[attention_mask.bool()]
    lead, trail = skipped_columns(attention_mask, response_length)
    kept = routed_experts[:, lead : attention_mask.shape[1] - trail]
    return kept.reshape(-1, *routed_experts.shape[2:])


class ActorMoE:
    """The MoE settings of one actor and the forward context that applies them.

    Args:
        config: the ``actor_rollout_ref.actor`` (or ``.ref``) section.
        module: the actor's model.
        load_metrics_interval: ``rollout.moe_load_balance_metrics_interval`` (0: no load metrics).
    """

    def __init__(self, config: Any, module: nn.Module, load_metrics_interval: int = 0) -> None:
        replay = config.get("router_replay")
        self.replay_mode = str(replay.get("mode") or "disabled") if replay is not None else "disabled"
        if self.replay_mode not in _REPLAY_MODES:
            raise ValueError(
                f"actor_rollout_ref.actor.router_replay.mode={self.replay_mode!r}: hybridrl's FSDP actor supports "
                f"{_REPLAY_MODES} (R3 replays the rollout's routing); set it to one of them"
            )
        self.aux_loss = bool(config.get("use_router_aux_loss"))
        self.load_metrics_interval = int(load_metrics_interval or 0)
        self.num_experts = num_experts_of(module)
        self.aux_loss_coef = float(getattr(getattr(module, "config", None), "router_aux_loss_coef", 0.0) or 0.0)
        self._module = module
        self._updates = 0
        if self.aux_loss or self.replay_mode != "disabled":
            _check_model(module, self.num_experts)

    @property
    def active(self) -> bool:
        return self.num_experts is not None

    def start_update(self) -> bool:
        """Count an update; whether this one logs expert-load metrics."""
        self._updates += 1
        return self.load_metrics_interval > 0 and self._updates % self.load_metrics_interval == 0

    @contextlib.contextmanager
    def forward_context(self, micro_batch: Any, packed: bool, training: bool) -> Iterator[RoutingCapture | None]:
        """Hooks for one micro-batch's forward: replay when the batch has a record and R3 is on, the aux loss in
        training. Yields None (no hooks) for a dense model or when nothing is asked."""
        replay = None
        if self.replay_mode == "R3":
            if ROUTED_EXPERTS_KEY not in micro_batch.keys():
                raise KeyError(
                    "actor_rollout_ref.actor.router_replay.mode=R3 needs the batch's routed_experts: set "
                    "actor_rollout_ref.rollout.enable_rollout_routing_replay=True (hf rollout)"
                )
            targets = replay_targets(
                micro_batch[ROUTED_EXPERTS_KEY],
                micro_batch["attention_mask"],
                micro_batch["responses"].shape[-1],
                packed,
            )
            replay = _layer_lookup(targets)
        if not self.active or (replay is None and not self.aux_loss and not self.load_metrics_interval):
            yield None
            return
        with capture_routing(self._module, aux_loss=self.aux_loss and training, replay=replay) as capture:
            yield capture

    def add_aux_loss(
        self, policy_loss: torch.Tensor, metrics: dict[str, float], capture: RoutingCapture | None
    ) -> torch.Tensor:
        """``policy_loss + coef · aux_loss`` (metric ``actor/aux_loss``) when the aux loss is on."""
        aux = capture.aux_loss() if capture is not None and self.aux_loss else None
        if aux is None:
            return policy_loss
        metrics[AUX_LOSS_METRIC] = aux.detach().item()
        return policy_loss + self.aux_loss_coef * aux.to(policy_loss.device)

    def load_metrics(self, captures: list[RoutingCapture | None]) -> dict[str, float]:
        """Expert-load metrics over the valid tokens of the update's forwards."""
        ids = [c.valid_expert_ids() for c in captures if c is not None]
        ids = [i for i in ids if i is not None]
        if not ids or self.num_experts is None:
            return {}
        return load_balance_metrics(expert_load_counts(torch.cat(ids), self.num_experts), LOAD_METRICS_PREFIX)


def _check_model(module: nn.Module, num_experts: int | None) -> None:
    """Refuse the router aux loss and replay on a dense model or an MoE family whose routers are not registered."""
    fix = (
        "set actor_rollout_ref.actor.use_router_aux_loss=False and actor_rollout_ref.actor.router_replay.mode=disabled"
    )
    if num_experts is None:
        raise ValueError(f"{type(module).__name__} is not a mixture-of-experts model: {fix}")
    if not supports(module, FastPath.ROUTER_REPLAY):
        raise ValueError(
            f"model_type={model_type_of(module)!r}: its MoE routers are not in the model registry's router_replay path "
            f"(hybridrl.models.families lists {model_types_for(FastPath.ROUTER_REPLAY)}): {fix}"
        )


def _layer_lookup(targets: torch.Tensor):
    """``replay(layer, num_tokens) -> [T, k]`` over ``targets [T, L, k]``, refusing a token-count mismatch."""

    def replay(layer: int, num_tokens: int) -> torch.Tensor:
        if num_tokens != targets.shape[0] or layer >= targets.shape[1]:
            raise ValueError(
                f"routing replay: the forward routes {num_tokens} tokens in MoE layer {layer}, the record holds "
                f"{targets.shape[0]} tokens x {targets.shape[1]} layers (shared_prompt_prefix and Ulysses do not "
                "support replay)"
            )
        return targets[:, layer]

    return replay
