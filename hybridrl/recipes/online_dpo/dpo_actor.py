"""Data-parallel DPO actor: the PPO actor's forward and micro-batching, with a DPO loss instead of PPO's.

One call of :meth:`DataParallelDPOActor.update_policy_dpo` on a rank's pair batch (rows chosen, rejected, …)::

    for epoch in ppo_epochs:                                   # one optimizer step per epoch (verl's SPIN recipe)
        for micro_batch in rows.split(micro_rows):             # micro_rows even → whole pairs
            logp      = Σ_t m_t log π(y_t)       [b]           (policy, with grad)
            logp_ref  = Σ_t m_t ref_log_prob_t   [b]           (from compute_ref_log_prob)
            loss      = Σ_pairs w · L_dpo / (P_global / world_size) ; loss.backward()
        clip_grad_and_step(grad_clip)

Dividing by the rank's share of the global pair count makes FSDP's gradient average over ranks equal to
the global per-pair mean, whatever the padding (weight-0 pairs) on each rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig

from hybridrl.algos.dpo_losses import compute_dpo_loss, sequence_log_prob, split_pairs
from hybridrl.protocol import DataProto
from hybridrl.recipes.online_dpo.pairs import PAIR_WEIGHT_KEY
from hybridrl.utils.py_functional import append_to_dict
from hybridrl.workers.actor import DataParallelPPOActor

__all__ = ["DPO_UPDATE_KEYS", "DPOHyperParams", "DataParallelDPOActor", "dpo_micro_rows"]

DPO_UPDATE_KEYS = [
    "responses",
    "input_ids",
    "attention_mask",
    "position_ids",
    "response_mask",
    "ref_log_prob",
    PAIR_WEIGHT_KEY,
]


@dataclass(frozen=True)
class DPOHyperParams:
    """``algorithm.dpo`` as the actor needs it (read once, at the trainer boundary; travels in ``meta_info``)."""

    beta: float
    loss_type: str
    label_smoothing: float

    def as_meta(self) -> dict[str, Any]:
        return {"dpo_beta": self.beta, "dpo_loss_type": self.loss_type, "dpo_label_smoothing": self.label_smoothing}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> DPOHyperParams:
        missing = [k for k in ("dpo_beta", "dpo_loss_type", "dpo_label_smoothing") if k not in meta]
        if missing:
            raise KeyError(
                f"update_actor_dpo: data.meta_info lacks {missing} (the trainer sets them from algorithm.dpo)"
            )
        return cls(float(meta["dpo_beta"]), str(meta["dpo_loss_type"]), float(meta["dpo_label_smoothing"]))


def dpo_micro_rows(config: DictConfig, sequence_length: int) -> int:
    """Rows per micro-batch, even so pairs stay whole: ``ppo_micro_batch_size_per_gpu`` rounded down to even
    (at least 2); with ``use_dynamic_bsz`` the token budget ``ppo_max_token_len_per_gpu // S`` instead."""
    if config.use_dynamic_bsz:
        rows = int(config.get("ppo_max_token_len_per_gpu") or 0) // max(sequence_length, 1)
    else:
        rows = config.get("ppo_micro_batch_size_per_gpu")
        if not rows:
            raise ValueError(
                "DPO needs actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (rows per micro-batch; pairs are 2 rows)."
            )
    return max(2, int(rows) - int(rows) % 2)


class DataParallelDPOActor(DataParallelPPOActor):
    """:class:`DataParallelPPOActor` plus a DPO update over a pair batch (reference log-probs precomputed)."""

    def _resolve_pg_loss(self) -> None:
        """No PPO policy loss: this actor trains with :func:`compute_dpo_loss`."""
        return None

    def _pair_forward(self, micro_batch: Any, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Sequence log-probs ``(policy [b], reference [b])`` of a micro-batch; the policy's carry grad."""
        _, log_prob = self._forward_micro_batch(micro_batch, temperature, calculate_entropy=False)
        mask = micro_batch["response_mask"]
        return sequence_log_prob(log_prob, mask), sequence_log_prob(micro_batch["ref_log_prob"], mask)

    def update_policy_dpo(self, data: DataProto, num_pairs_per_rank: float) -> dict[str, list[float]]:
        """DPO update on this rank's pair batch.

        Args:
            data: rows (chosen, rejected, …) with :data:`DPO_UPDATE_KEYS` ``[2P, ·]``; ``meta_info`` holds
                ``temperature`` and the ``dpo_*`` hyper-parameters (:class:`DPOHyperParams`).
            num_pairs_per_rank: the loss denominator, ``global real pairs / world_size``.

        Returns:
            Per epoch: ``actor/dpo_loss``, ``actor/rewards_chosen``, ``actor/rewards_rejected``,
            ``actor/reward_accuracy``, ``actor/reward_margin``, ``actor/dpo_logits``,
            ``actor/policy_{chosen,rejected}_logps`` (this rank's real pairs, before the step) and
            ``actor/grad_norm``.
        """
        if self.actor_optimizer is None:
            raise RuntimeError("update_policy_dpo called on a reference actor (no optimizer).")
        if len(data) % 2:
            raise ValueError(f"update_policy_dpo: a rank got {len(data)} rows; pairs need an even count per rank")
        hyper = DPOHyperParams.from_meta(data.meta_info)
        temperature = self._call_temperature(data.meta_info)
        batch = data.select(batch_keys=DPO_UPDATE_KEYS).batch
        micro_rows = dpo_micro_rows(self.config, batch["input_ids"].shape[-1])
        self.actor_module.train()
        metrics: dict[str, list[float]] = {}
        for _ in range(self.config.ppo_epochs):
            self.actor_optimizer.zero_grad()
            seen: list[torch.Tensor] = []  # [b, 3]: policy logp, reference logp, weight per row
            for micro_batch in batch.split(micro_rows):
                policy, reference = self._pair_forward(micro_batch, temperature)
                (policy_chosen, policy_rejected), (ref_chosen, ref_rejected) = (
                    split_pairs(policy),
                    split_pairs(reference),
                )
                weights = split_pairs(micro_batch[PAIR_WEIGHT_KEY])[0]
                loss, _ = compute_dpo_loss(
                    policy_chosen,
                    policy_rejected,
                    ref_chosen,
                    ref_rejected,
                    hyper.beta,
                    hyper.loss_type,
                    hyper.label_smoothing,
                    pair_weights=weights,
                    num_pairs=num_pairs_per_rank,
                )
                loss.backward()
                seen.append(torch.stack([policy.detach(), reference, micro_batch[PAIR_WEIGHT_KEY]], dim=-1))
            append_to_dict(metrics, self._epoch_metrics(torch.cat(seen), hyper))
            append_to_dict(metrics, {"actor/grad_norm": self._optimizer_step()})
        self.actor_optimizer.zero_grad()
        return metrics

    @staticmethod
    def _epoch_metrics(seen: torch.Tensor, hyper: DPOHyperParams) -> dict[str, float]:
        """Loss and implicit-reward metrics over the rank's real pairs (``seen [2P, 3]``); empty on a rank that
        holds only weight-0 padding, so the driver's mean over ranks counts real pairs only."""
        (policy_chosen, policy_rejected), (ref_chosen, ref_rejected) = split_pairs(seen[:, 0]), split_pairs(seen[:, 1])
        weights = split_pairs(seen[:, 2])[0]
        _, metrics = compute_dpo_loss(
            policy_chosen,
            policy_rejected,
            ref_chosen,
            ref_rejected,
            hyper.beta,
            hyper.loss_type,
            hyper.label_smoothing,
            pair_weights=weights,
        )
        return metrics
