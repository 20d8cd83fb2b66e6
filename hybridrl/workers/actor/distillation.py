"""The distillation term of the actor's loss (verl 0.9's ``distillation_ppo_loss``), per micro-batch.

The driver puts the teacher's log-probs of the sampled tokens in the batch (``teacher_logprobs [B, R]``) and the
loss settings in ``meta_info["distillation"]`` (:class:`DistillationLossParams`); the actor then adds

    policy_loss ← policy_loss + c · L_distill      (use_task_rewards; c = distillation_loss_coef)
    policy_loss ← L_distill                        (otherwise: the task loss is dropped, as verl)

with L_distill from :mod:`hybridrl.algos.distillation`. Only the single-sample estimators (k1, k3, ...) run in
the actor; the top-k forward KL needs the teacher's top-k ids and the student's logits and is refused by the
config check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hybridrl.algos.aggregation import GlobalBatchInfo
from hybridrl.algos.distillation import combine_with_task_loss, distillation_loss, reverse_kl_estimate
from hybridrl.utils import torch_functional as verl_F

__all__ = ["DISTILLATION_META_KEY", "TEACHER_LOG_PROBS_KEY", "DistillationLossParams", "add_distillation_loss"]

# the batch key of the teacher's log-probs of the sampled response tokens [B, R] (verl's name)
TEACHER_LOG_PROBS_KEY = "teacher_logprobs"
# the meta_info key carrying DistillationLossParams to the actor's update
DISTILLATION_META_KEY = "distillation"


@dataclass(frozen=True)
class DistillationLossParams:
    """``distillation.distillation_loss``'s values the actor reads (no defaults: the YAML holds them)."""

    loss_mode: str
    use_task_rewards: bool
    distillation_loss_coef: float
    loss_max_clamp: float | None
    use_policy_gradient: bool
    clip_ratio_low: float
    clip_ratio_high: float

    @classmethod
    def from_config(cls, loss_section: Any) -> DistillationLossParams:
        """From the ``distillation.distillation_loss`` section; verl's ``clip_ratio`` fills an unset low/high."""
        clip = float(loss_section.clip_ratio)
        low, high = loss_section.clip_ratio_low, loss_section.clip_ratio_high
        clamp = loss_section.loss_max_clamp
        return cls(
            loss_mode=str(loss_section.loss_mode),
            use_task_rewards=bool(loss_section.use_task_rewards),
            distillation_loss_coef=float(loss_section.distillation_loss_coef),
            loss_max_clamp=None if clamp is None else float(clamp),
            use_policy_gradient=bool(loss_section.use_policy_gradient),
            clip_ratio_low=clip if low is None else float(low),
            clip_ratio_high=clip if high is None else float(high),
        )


def add_distillation_loss(
    params: DistillationLossParams,
    policy_loss: torch.Tensor,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    micro_batch: Any,
    loss_agg_mode: str,
    global_batch: GlobalBatchInfo,
    metrics: dict[str, float],
) -> torch.Tensor:
    """The micro-batch's loss with the distillation term (module docstring); adds ``distillation/*`` to ``metrics``.

    Args:
        policy_loss: ``[]`` the task (PPO) loss of the micro-batch.
        log_prob, old_log_prob: ``[B, R]`` the student's log-probs now (with gradient) and at sampling time.
        micro_batch: holds ``teacher_logprobs [B, R]`` and ``response_mask [B, R]``.
    """
    response_mask = micro_batch["response_mask"]
    per_token = reverse_kl_estimate(log_prob, micro_batch[TEACHER_LOG_PROBS_KEY], params.loss_mode)
    if params.use_policy_gradient:
        per_token = per_token.detach()
    distill, distill_metrics = distillation_loss(
        per_token, response_mask, loss_agg_mode, loss_max_clamp=params.loss_max_clamp,
        use_policy_gradient=params.use_policy_gradient, log_prob=log_prob, old_log_prob=old_log_prob,
        clip_ratio_low=params.clip_ratio_low, clip_ratio_high=params.clip_ratio_high, global_batch=global_batch,
    )
    metrics.update(distill_metrics)
    with torch.no_grad():  # k1 can be negative: verl logs the mean absolute per-token loss too
        metrics["distillation/abs_loss"] = float(verl_F.masked_mean(per_token.abs(), response_mask))
    metrics["distillation/loss"] = float(distill.detach())
    return combine_with_task_loss(policy_loss, distill, params.use_task_rewards, params.distillation_loss_coef)
