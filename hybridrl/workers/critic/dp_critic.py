"""Data-parallel PPO critic: values and the clipped value-loss update of one rank (verl 0.5 ``dp_critic``).

The critic is a token-classification model with one label: ``logits [B, S, 1]`` is a value per
position. The value of response token ``t`` is read at the position that predicts it (``[-R-1, -1)``),
the same slice the actor uses for log-probs, so ``values[:, t]`` pairs with ``old_log_probs[:, t]``.

The update loop mirrors the actor's (``ppo_epochs`` × mini-batches × micro-batches):

    V_clip  = clip(V_pred, V_old − cliprange_value, V_old + cliprange_value)
    vf_loss = ½ · agg(max((V_pred − R)², (V_clip − R)²))   backpropagated as it is

``agg`` normalises by the mini-batch's global token / sequence counts over all data-parallel ranks, times
their number (verl 0.9, ``hybridrl.workers.actor.global_batch``), so the accumulated gradient does not depend
on the micro-batch split; ``critic/vf_loss`` is summed over a mini-batch's micro-batches and reported once.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hybridrl.algos.aggregation import LOCAL_BATCH, GlobalBatchInfo
from hybridrl.algos.value_loss import clipped_value_loss
from hybridrl.config.batch_plan import ForwardPlan, RolePlan
from hybridrl.config.worker_plan import update_split
from hybridrl.protocol import DataProto
from hybridrl.utils.config_defaults import is_filled, section_with_defaults
from hybridrl.utils.device import get_device_name
from hybridrl.utils.py_functional import append_to_dict
from hybridrl.utils.torch_functional import masked_mean
from hybridrl.utils.ulysses import sp_token_budget
from hybridrl.workers.actor.divergence import NonFiniteStepGuard, guarded_optimizer_step
from hybridrl.workers.actor.forward import forward_response, restore_order, split_micro_batches
from hybridrl.workers.actor.global_batch import merge_micro_batch_metrics, mini_batch_info, world_size
from hybridrl.workers.actor.knobs import compute_dtype_context
from hybridrl.workers.critic.base import BasePPOCritic

__all__ = ["DataParallelPPOCritic"]

_VALUE_KEYS = ["responses", "input_ids", "attention_mask", "position_ids"]
_UPDATE_KEYS = [*_VALUE_KEYS, "response_mask", "values", "returns"]


class DataParallelPPOCritic(BasePPOCritic):
    """PPO critic over an HF token-classification model (``num_labels=1``), plain or FSDP-wrapped.

    Args:
        config: the ``critic`` section.
        critic_module: the value model.
        critic_optimizer: its optimizer.
        use_remove_padding: ``critic.model.use_remove_padding``; None: read ``config.use_remove_padding``,
            where verl's worker copies it (absent: off).
        update: the batch plan's per-rank sizes of the update; None: the section's, already per rank (verl).
        values: micro-batches of :meth:`compute_values`; None: ``data.meta_info``'s per call (verl).
    """

    def __init__(
        self,
        config: Any,
        critic_module: nn.Module,
        critic_optimizer: torch.optim.Optimizer | None,
        use_remove_padding: bool | None = None,
        *,
        update: RolePlan | None = None,
        values: ForwardPlan | None = None,
    ) -> None:
        # the worker's section is filled already; one built by hand (verl's unit tests) is filled here
        super().__init__(config if is_filled(config, "critic") else section_with_defaults(config, "critic"))
        config = self.config
        self.critic_module = critic_module
        self.critic_optimizer = critic_optimizer
        if use_remove_padding is None:
            use_remove_padding = bool(config.get("use_remove_padding"))
        self.use_remove_padding = use_remove_padding
        self.device_name = get_device_name()
        self._sp_size = int(config.ulysses_sequence_parallel_size or 1)
        self._values_split = values
        self._mini_batch_size, self._update_split = update_split(config, update)
        # counts skipped (non-finite) optimizer steps; stops a diverged run
        self.divergence_guard = NonFiniteStepGuard("critic", config.max_consecutive_nonfinite_steps, config.optim.lr)

    def _forward_micro_batch(self, micro_batch: Any) -> torch.Tensor:
        """Values ``[B, R]`` of the response positions (unmasked)."""
        with compute_dtype_context(self.device_name):
            (values,) = forward_response(
                self.critic_module,
                micro_batch,
                self.use_remove_padding,
                lambda logits, _next_tokens: [logits.squeeze(-1)],
            )
        return values

    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values ``[B, R]``, multiplied by the response part of ``attention_mask`` (only actions have values).

        Micro-batches follow the ``values`` plan given at construction, else (a critic built by user code
        without one) ``data.meta_info``'s ``micro_batch_size``, ``use_dynamic_bsz`` and ``max_token_len`` (verl).
        """
        self.critic_module.eval()
        meta, split = data.meta_info, self._values_split
        batch = data.select(batch_keys=_VALUE_KEYS).batch
        if split is None:
            micro_batches, order = split_micro_batches(
                batch, meta.get("micro_batch_size"), bool(meta.get("use_dynamic_bsz")), meta.get("max_token_len")
            )
        else:
            budget = sp_token_budget(split.token_budget_per_rank, self._sp_size)
            micro_batches, order = split_micro_batches(batch, split.micro_batch_per_rank, split.use_dynamic_bsz, budget)
        with torch.no_grad():
            values = torch.cat([self._forward_micro_batch(micro) for micro in micro_batches], dim=0)
        values = restore_order(values, order)
        response_length = batch["responses"].shape[-1]
        response_mask = batch["attention_mask"][:, -response_length:]
        return values * response_mask

    def _optimizer_step(self) -> float:
        """Clip to ``grad_clip`` and step (skipped, grads zeroed, when the norm is not finite); the divergence
        guard raises DivergenceError after too many skips in a row or a step that blew the weights up."""
        assert self.critic_optimizer is not None and self.divergence_guard is not None
        return guarded_optimizer_step(self.divergence_guard, self.critic_module, self.critic_optimizer, self.config.grad_clip)

    def _dp_size(self) -> int:
        """Data-parallel ranks: the world over the Ulysses SP degree (the SP ranks of a group share their data)."""
        return world_size() // self._sp_size

    def _value_loss(
        self, micro_batch: Any, global_batch: GlobalBatchInfo = LOCAL_BATCH
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``vf_loss`` of one micro-batch, normalised by ``global_batch`` (default: this micro-batch alone)."""
        response_mask = micro_batch["response_mask"]
        vpreds = self._forward_micro_batch(micro_batch)
        vf_loss, value_metrics = clipped_value_loss(
            vpreds=vpreds,
            returns=micro_batch["returns"],
            values=micro_batch["values"],
            response_mask=response_mask,
            cliprange_value=self.config.cliprange_value,
            loss_agg_mode=self.config.loss_agg_mode,
            global_batch=global_batch,
        )
        metrics = {
            "critic/vf_loss": vf_loss.detach().item(),
            "critic/vf_clipfrac": value_metrics["critic/vf_clipfrac"].item(),
            "critic/vpred_mean": masked_mean(vpreds, response_mask).detach().item(),
        }
        return vf_loss, metrics

    def update_critic(self, data: DataProto) -> dict[str, list[float]]:
        """Clipped value-loss update; metrics ``critic/vf_clipfrac, vpred_mean`` per micro-batch, ``critic/vf_loss``
        (summed over the micro-batches) and ``critic/grad_norm`` per mini-batch (dict of lists)."""
        if self.critic_optimizer is None:
            raise RuntimeError("update_critic needs an optimizer.")
        self.critic_module.train()
        config = self.config
        batch = data.select(batch_keys=_UPDATE_KEYS).batch
        split, mini_batch_size = self._update_split, self._mini_batch_size
        metrics: dict[str, list[float]] = {}
        for _ in range(config.ppo_epochs):
            for mini_batch in batch.split(mini_batch_size):
                micro_batches, _ = split_micro_batches(
                    mini_batch,
                    split.micro_batch_per_rank,
                    split.use_dynamic_bsz,
                    sp_token_budget(split.token_budget_per_rank, self._sp_size),
                )
                info = mini_batch_info(mini_batch["response_mask"], self._dp_size(), config.get("loss_scale_factor"))
                self.critic_optimizer.zero_grad()
                micro_metrics = []
                for micro_batch in micro_batches:
                    vf_loss, metrics_of_micro = self._value_loss(micro_batch, info)
                    vf_loss.backward()
                    micro_metrics.append(metrics_of_micro)
                for key, values in merge_micro_batch_metrics(micro_metrics, info.is_global).items():
                    metrics.setdefault(key, []).extend(values)
                append_to_dict(metrics, {"critic/grad_norm": self._optimizer_step()})
        self.critic_optimizer.zero_grad()
        return metrics
