"""Rollout importance sampling: weights ρ = π_train / π_rollout that correct for sampling from another policy.

The rollout engine and the trainer never assign exactly the same probabilities (kernels, precision, a stale
policy in async training). Weighting each token's loss by ρ turns the rollout's samples into an estimate
under the training policy; truncating ρ bounds the variance (Ionides 2008; "Your efficient RL framework
secretly brings you off-policy RL training", Yao et al. 2025). Names and numerics follow verl 0.9's
``rollout_corr_helper`` (``algorithm.rollout_correction.rollout_is*``).

Notation:
    B: sequences, T: response length; ``[B, T]`` unless stated.
    log r_t = log π_train(y_t) − log π_rollout(y_t)   (decoupled: π_train = π_old; bypass: π_θ)
    m: response mask.

Levels (``rollout_is``):
    token      ρ_t = exp(clamp(log r_t, ±20))
    sequence   ρ_t = exp(clamp(Σ_t m log r_t, ±20)) for every t of the sequence (one weight per sequence)

Thresholds (``rollout_is_threshold``):
    upper (float or "2.0")   TIS: w = min(ρ, upper)
    "lower_upper" string     IcePop: w = ρ if lower ≤ ρ ≤ upper else 0   (the mask is not changed)

Batch normalisation (``rollout_is_batch_normalize``): w ← w / mean(w), after truncation; the mean is over the
valid tokens (token level) or over the per-sequence weights of non-empty sequences (sequence level).
"""

from __future__ import annotations

import math

import torch

from hybridrl.algos.rollout_correction_config import IS_LEVELS, ISThreshold, parse_is_threshold
from hybridrl.utils import torch_functional as verl_F

__all__ = [
    "IS_LEVELS",
    "SAFETY_BOUND",
    "ISThreshold",
    "compute_is_metrics",
    "compute_rollout_is_weights",
    "normalize_is_weights",
    "parse_is_threshold",
]

# log-ratios are clamped to ±20 before exp: e^20 ≈ 4.9e8 is finite in fp32, an unclamped sum over a long
# sequence overflows to inf (verl's SAFETY_BOUND).
SAFETY_BOUND = 20.0
# below this mean weight, batch normalisation would divide by ~0: the weights are left as they are (verl)
_MIN_NORMALIZE_MEAN = 1e-8
# ESS: w / (mean w + eps) (verl)
_ESS_EPS = 1e-8


def _raw_weights(log_ratio: torch.Tensor, response_mask: torch.Tensor, level: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ρ · m [B, T], the unclamped log-ratio the metrics read: [B, T] token / [B, 1] sequence)``."""
    if level == "token":
        log_for_metrics = log_ratio
        raw = torch.exp(torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
    elif level == "sequence":
        log_for_metrics = verl_F.masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)  # Σ_t m log r_t, [B, 1]
        raw = torch.exp(torch.clamp(log_for_metrics, -SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    else:
        raise ValueError(f"rollout_is must be one of {IS_LEVELS} (or null), got {level!r}")
    return raw * response_mask, log_for_metrics


def compute_rollout_is_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    level: str,
    threshold: ISThreshold,
    batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated (TIS) or masked (IcePop) IS weights, detached, and verl's ``rollout_is_*`` metrics.

    Args:
        log_ratio: ``[B, T]`` log π_train − log π_rollout.
        response_mask: ``[B, T]`` m.
        level: ``token`` | ``sequence``.
        threshold: :func:`parse_is_threshold`'s result.
        batch_normalize: divide by the batch mean after truncation.

    Returns:
        ``(weights [B, T]`` (0 on padding), ``metrics`` without the ``rollout_corr/`` prefix).
    """
    raw, log_for_metrics = _raw_weights(log_ratio, response_mask, level)
    if threshold.lower is not None:  # IcePop: weights outside [lower, upper] are zeroed
        kept = (raw >= threshold.lower) & (raw <= threshold.upper)
        weights = torch.where(kept, raw, torch.zeros_like(raw))
    else:  # TIS: w = min(ρ, upper)
        weights = raw.clamp(max=threshold.upper)
    weights = weights.detach()  # IS weights change the measure, not the objective: no gradient through them
    metrics = compute_is_metrics(weights, raw, log_for_metrics, response_mask, level, threshold)
    if batch_normalize:
        weights, norm_factor = normalize_is_weights(weights, response_mask, level)
        metrics["rollout_is_batch_norm_factor"] = norm_factor
    return weights, metrics


def normalize_is_weights(weights: torch.Tensor, response_mask: torch.Tensor, level: str) -> tuple[torch.Tensor, float]:
    """``w / mean(w)`` and the mean used (1.0 when the mean is ~0 and nothing is divided).

    token: mean over valid tokens; sequence: mean over the non-empty sequences' weights (each sequence once).
    """
    if level == "token":
        mean = verl_F.masked_mean(weights, response_mask)
    else:
        seq_weights = verl_F.masked_mean(weights, response_mask, axis=-1)  # [B]
        seq_valid = (response_mask.sum(dim=-1) > 0).to(weights.dtype)
        mean = (seq_weights * seq_valid).sum() / seq_valid.sum().clamp_min(_MIN_NORMALIZE_MEAN)
    if not mean > _MIN_NORMALIZE_MEAN:
        return weights, 1.0
    return weights / mean, float(mean)


def compute_is_metrics(
    weights: torch.Tensor,
    raw_weights: torch.Tensor,
    log_for_metrics: torch.Tensor,
    response_mask: torch.Tensor,
    level: str,
    threshold: ISThreshold,
) -> dict[str, float]:
    """verl's ``rollout_is_*`` metrics (no prefix).

    mean of the applied weights; max/min (token: of the applied weights; sequence: of the unclamped ρ);
    ratio_fraction_high/low: share above ``upper`` / below ``lower`` (1/upper for TIS); std and effective
    sample size ESS = 1 / mean((w / mean w)²); per-sequence statistics of the mean weight.
    """
    mask = response_mask.bool()
    lower = threshold.lower if threshold.lower is not None else 1.0 / threshold.upper
    metrics = {"rollout_is_mean": verl_F.masked_mean(weights, response_mask).item()}
    if level == "sequence":
        metrics["rollout_is_max"] = torch.exp(torch.clamp(log_for_metrics.max(), max=SAFETY_BOUND)).item()
        metrics["rollout_is_min"] = torch.exp(log_for_metrics.min()).item()
        # one entry per sequence, in log space (the unclamped product of ratios)
        metrics["rollout_is_ratio_fraction_high"] = (log_for_metrics > math.log(threshold.upper)).float().mean().item()
        metrics["rollout_is_ratio_fraction_low"] = (log_for_metrics < math.log(lower)).float().mean().item()
    else:
        metrics["rollout_is_max"] = weights.masked_fill(~mask, float("-inf")).max().item()
        metrics["rollout_is_min"] = weights.masked_fill(~mask, float("inf")).min().item()
        metrics["rollout_is_ratio_fraction_high"] = verl_F.masked_mean(
            (raw_weights > threshold.upper).float(), response_mask
        ).item()
        metrics["rollout_is_ratio_fraction_low"] = verl_F.masked_mean(
            (raw_weights < lower).float(), response_mask
        ).item()
    bounded = weights.clamp(min=0.0, max=threshold.upper)
    bounded_mean = verl_F.masked_mean(bounded, response_mask)
    variance = verl_F.masked_mean(bounded.square(), response_mask) - bounded_mean.square()
    metrics["rollout_is_std"] = variance.clamp(min=0.0).sqrt().item() if response_mask.sum() > 1 else 0.0
    normalized = bounded / (bounded_mean + _ESS_EPS)
    metrics["rollout_is_eff_sample_size"] = 1.0 / verl_F.masked_mean(normalized.square(), response_mask).item()
    metrics.update(_sequence_is_metrics(weights, raw_weights, response_mask, threshold.upper, lower))
    if threshold.lower is not None:  # IcePop
        outside = (raw_weights < threshold.lower) | (raw_weights > threshold.upper)
        metrics["rollout_is_oob_ratio"] = verl_F.masked_mean(outside.float(), response_mask).item()
    return metrics


def _sequence_is_metrics(
    weights: torch.Tensor, raw_weights: torch.Tensor, response_mask: torch.Tensor, upper: float, lower: float
) -> dict[str, float]:
    """``rollout_is_seq_*``: statistics of each sequence's mean weight (fractions from the untruncated ρ)."""
    seq_mean = verl_F.masked_mean(weights, response_mask, axis=-1)  # [B]
    raw_seq_mean = verl_F.masked_mean(raw_weights, response_mask, axis=-1)  # [B]
    return {
        "rollout_is_seq_mean": seq_mean.mean().item(),
        "rollout_is_seq_std": seq_mean.std().item() if seq_mean.numel() > 1 else 0.0,
        "rollout_is_seq_max": seq_mean.max().item(),
        "rollout_is_seq_min": seq_mean.min().item(),
        "rollout_is_seq_max_deviation": (seq_mean - 1.0).abs().max().item(),
        "rollout_is_seq_fraction_high": (raw_seq_mean > upper).float().mean().item(),
        "rollout_is_seq_fraction_low": (raw_seq_mean < lower).float().mean().item(),
    }
