"""Rollout correction: IS weights + rejection mask + off-policy diagnostics, as verl 0.9 (``rollout_corr/*``).

Two operating modes (``algorithm.rollout_correction.bypass_mode``), as verl:

    decoupled (False)  three policies: π_rollout (sampled), π_old (recomputed by the old-log-prob forward,
                       the PPO anchor), π_θ. The driver computes, once per batch, the weights
                       w = f(π_old / π_rollout) and the rejection mask; the actor multiplies every token's
                       policy loss by w and trains on the reduced mask.
    bypass (True)      two policies: the rollout's log-probs serve as π_old and the old-log-prob forward is
                       skipped. The actor computes the correction per micro-batch from π_θ / π_rollout:
                       ``loss_type=ppo_clip`` → PPO's ratio already is π_θ / π_rollout, so the weights are
                       not applied again (only the rejection mask); ``loss_type=reinforce`` → −w·A·log π_θ.

Deviations from verl: none in the math. Bypass batch normalisation normalises over the micro-batch (verl: over
the micro-batch, all-reduced across ranks when torch.distributed is up).

Notation: ``[B, T]`` tensors; log r = log π_train − log π_rollout; m: response mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hybridrl.algos.aggregation import LOCAL_BATCH, GlobalBatchInfo
from hybridrl.algos.policy_losses import Metrics, ppo_clip_loss, reinforce_loss
from hybridrl.algos.rollout_correction_config import (
    BYPASS_LOSS_TYPES,
    RolloutCorrectionParams,
    rollout_correction_params,
)
from hybridrl.algos.rollout_is import (
    SAFETY_BOUND,
    compute_rollout_is_weights,
)
from hybridrl.algos.rollout_rs import compute_rejection_mask
from hybridrl.utils import torch_functional as verl_F

__all__ = [
    "BYPASS_LOSS_TYPES",
    "METRIC_PREFIX",
    "RolloutCorrection",
    "RolloutCorrectionParams",
    "bypass_policy_loss",
    "compute_offpolicy_metrics",
    "compute_rollout_correction",
    "rollout_correction_params",
]

METRIC_PREFIX = "rollout_corr/"


@dataclass(frozen=True)
class RolloutCorrection:
    """The correction of one batch."""

    weights: torch.Tensor | None  # [B, T] IS weights (detached; 0 on padding), None when rollout_is is null
    response_mask: torch.Tensor  # [B, T] the mask with rejected tokens / sequences set to 0
    metrics: dict[str, float]  # rollout_corr/*


def compute_rollout_correction(
    train_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    params: RolloutCorrectionParams,
) -> RolloutCorrection:
    """IS weights (when ``rollout_is``), rejection mask (when ``rollout_rs``) and off-policy metrics.

    Args:
        train_log_prob: ``[B, T]`` log π_train (decoupled: old_log_probs; bypass: the current, detached).
        rollout_log_prob: ``[B, T]`` log π_rollout.
        response_mask: ``[B, T]`` m, with at least one valid token.
    """
    if train_log_prob.shape != rollout_log_prob.shape or train_log_prob.shape != response_mask.shape:
        raise ValueError(
            f"rollout correction: shapes differ: training log-probs {tuple(train_log_prob.shape)}, rollout "
            f"log-probs {tuple(rollout_log_prob.shape)}, response_mask {tuple(response_mask.shape)}"
        )
    if not response_mask.any():
        raise ValueError("rollout correction: response_mask has no valid token")
    log_ratio = train_log_prob - rollout_log_prob  # log r
    metrics: dict[str, float] = {}
    weights = None
    if params.rollout_is is not None and params.is_threshold is not None:
        weights, is_metrics = compute_rollout_is_weights(
            log_ratio, response_mask, params.rollout_is, params.is_threshold, params.batch_normalize
        )
        metrics.update(is_metrics)
    mask = response_mask
    if params.rs_options:
        mask, rs_metrics = compute_rejection_mask(log_ratio, response_mask, params.rs_options)
        metrics.update(rs_metrics)
    metrics.update(compute_offpolicy_metrics(train_log_prob, rollout_log_prob, response_mask))
    return RolloutCorrection(weights, mask, {METRIC_PREFIX + key: value for key, value in metrics.items()})


def compute_offpolicy_metrics(
    train_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """verl's off-policy diagnostics (no prefix), all over valid tokens:

    kl = mean(log π_rollout − log π_train)                KL(π_rollout ‖ π_train), k1 estimator
    k3_kl = mean(r − log r − 1)                           the same KL, k3 estimator
    training_ppl / rollout_ppl = mean_i exp(−mean_t log π)     (and their logs, *_log_ppl)
    log_ppl_diff_i = mean_t log π_rollout − mean_t log π_train; ppl_ratio = mean_i exp(log_ppl_diff_i)
    chi2_token = mean(r²) − 1,  chi2_seq = mean_i exp(2 Σ_t log r) − 1   (χ²(π_train ‖ π_rollout); ±20 clamps)
    """
    log_ratio = train_log_prob - rollout_log_prob
    mean_train = verl_F.masked_mean(train_log_prob, response_mask, axis=-1)  # [B]
    mean_rollout = verl_F.masked_mean(rollout_log_prob, response_mask, axis=-1)  # [B]
    log_ppl_diff = mean_rollout - mean_train  # [B]
    rho = torch.exp(torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
    seq_log_ratio = torch.clamp(verl_F.masked_sum(log_ratio, response_mask, axis=-1), -SAFETY_BOUND, SAFETY_BOUND)
    return {
        "training_ppl": torch.exp(-mean_train).mean().item(),
        "training_log_ppl": (-mean_train).mean().item(),
        "kl": verl_F.masked_mean(-log_ratio, response_mask).item(),
        "k3_kl": verl_F.masked_mean(torch.exp(log_ratio) - log_ratio - 1, response_mask).item(),
        "rollout_ppl": torch.exp(-mean_rollout).mean().item(),
        "rollout_log_ppl": (-mean_rollout).mean().item(),
        "log_ppl_diff": log_ppl_diff.mean().item(),
        "log_ppl_abs_diff": log_ppl_diff.abs().mean().item(),
        "log_ppl_diff_max": log_ppl_diff.max().item(),
        "log_ppl_diff_min": log_ppl_diff.min().item(),
        "ppl_ratio": torch.exp(log_ppl_diff).mean().item(),
        "chi2_token": (verl_F.masked_mean(rho.square(), response_mask) - 1.0).item(),
        "chi2_seq": (torch.exp(2.0 * seq_log_ratio).mean() - 1.0).item(),
    }


def bypass_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    params: RolloutCorrectionParams,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
) -> tuple[torch.Tensor, Metrics]:
    """Bypass mode's policy loss (``old_log_prob`` holds the rollout's log-probs).

    The correction is computed from π_θ (detached) vs π_rollout, then:
        ppo_clip:   PPO clip on ρ = π_θ / π_rollout over the kept tokens (no extra IS weight: ρ is the weight)
        reinforce:  L = −w · A · log π_θ over the kept tokens (w = 1 when ``rollout_is`` is null)

    Returns:
        ``(loss [], metrics)``: the loss's ``actor/*`` metrics and ``rollout_corr/*``.
    """
    with torch.no_grad():
        correction = compute_rollout_correction(log_prob.detach(), old_log_prob, response_mask, params)
    if params.loss_type == "reinforce":
        loss, metrics = reinforce_loss(
            old_log_prob,
            log_prob,
            advantages,
            correction.response_mask,
            loss_agg_mode=loss_agg_mode,
            global_batch=global_batch,
            rollout_is_weights=correction.weights,
        )
    else:
        loss, metrics = ppo_clip_loss(
            old_log_prob,
            log_prob,
            advantages,
            correction.response_mask,
            clip_ratio_low,
            clip_ratio_high,
            clip_ratio_c,
            loss_agg_mode,
            global_batch,
        )
    return loss, {**metrics, **{key: torch.tensor(value) for key, value in correction.metrics.items()}}
