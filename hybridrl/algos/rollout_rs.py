"""Rollout rejection sampling: drop tokens or whole sequences whose rollout and training policies disagree.

Where truncated IS bounds a weight, rejection sampling removes the sample: a hard trust region on a divergence
estimate between π_train and π_rollout ("When Speed Kills Stability", Li et al. 2025,
https://richardli.xyz/rl-collapse). Names, options and numerics follow verl 0.9's ``rollout_corr_helper``
(``algorithm.rollout_correction.rollout_rs`` / ``rollout_rs_threshold``).

Notation:
    log r_t = log π_train(y_t) − log π_rollout(y_t)  (clamped to ±20), m: response mask, ``[B, T]``.

Per-token divergence estimators (Schulman's k1/k2/k3 of KL(π_rollout ‖ π_train)):
    k1 = −log r          k2 = ½ (log r)²          k3 = r − 1 − log r

Options (``rollout_rs``, comma separated; a token/sequence is kept only if every option keeps it):
    token_k{1,2,3}       each token by its own value
    seq_sum_k{1,2,3}     each sequence by Σ_t m k
    seq_mean_k{1,2,3}    each sequence by Σ_t m k / n   (seq_mean_k1: the geometric-mean ratio test)
    seq_max_k{2,3}       each sequence by max_t k

Thresholds (``rollout_rs_threshold``, one per option, comma separated, or one for all):
    k1 options   ratio bounds "lower_upper" (a single number u means lower = 1/u); kept when
                 log(lower) ≤ k1 ≤ log(upper), i.e. lower ≤ π_rollout/π_train ≤ upper (verl's convention)
    k2/k3        an upper bound; kept when k ≤ upper
"""

from __future__ import annotations

import torch

from hybridrl.algos.rollout_correction_config import RS_OPTIONS, RSOption, parse_rs_options
from hybridrl.algos.rollout_is import SAFETY_BOUND
from hybridrl.utils import torch_functional as verl_F

__all__ = ["RS_OPTIONS", "RSOption", "compute_rejection_mask", "divergence_estimates", "parse_rs_options"]


def divergence_estimates(log_ratio: torch.Tensor) -> dict[str, torch.Tensor]:
    """k1, k2, k3 per token ``[B, T]`` of the clamped log-ratio (see the module docstring)."""
    log_r = torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND)
    return {"k1": -log_r, "k2": 0.5 * log_r.square(), "k3": torch.exp(log_r) - 1.0 - log_r}


def _statistic(option: RSOption, per_token: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The option's statistic: ``[B, T]`` for token options, ``[B]`` for sequence options."""
    if option.level == "token":
        return per_token
    if option.level == "seq_sum":
        return verl_F.masked_sum(per_token, response_mask, axis=-1)
    if option.level == "seq_mean":
        return verl_F.masked_mean(per_token, response_mask, axis=-1)
    seq_max = per_token.masked_fill(~response_mask.bool(), float("-inf")).max(dim=-1).values
    return torch.where(torch.isinf(seq_max), torch.zeros_like(seq_max), seq_max)  # empty sequence: 0


def _option_metrics(
    option: RSOption, stat: torch.Tensor, keep: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """``rollout_rs_<option>_*``: the statistic's mean/max/min/std, shares above/below the bounds, the per-sequence
    ``_seq_*`` statistics, shares masked (verl 0.9's names)."""
    prefix = f"rollout_rs_{option.name}"
    seq_valid = response_mask.sum(dim=-1) > 0
    # a sequence statistic has one value per non-empty sequence; its mean is token-weighted (verl)
    per_token = stat.unsqueeze(-1).expand_as(response_mask) if stat.dim() == 1 else stat
    values = stat[seq_valid] if stat.dim() == 1 else stat[response_mask.bool()]
    high = (values > option.upper).float().mean().item()
    low = (values < option.lower).float().mean().item() if option.lower is not None else 0.0
    token_keep = keep if keep.dim() == 2 else keep.unsqueeze(-1).expand_as(response_mask)
    rejected_in_seq = (~token_keep & response_mask.bool()).any(dim=-1)
    # one value per non-empty sequence: the statistic itself, or a token statistic's per-sequence mean
    seq_values = stat if stat.dim() == 1 else verl_F.masked_mean(stat, response_mask, axis=-1)
    return {
        f"{prefix}_mean": verl_F.masked_mean(per_token, response_mask).item(),
        f"{prefix}_max": values.max().item(),
        f"{prefix}_min": values.min().item(),
        f"{prefix}_fraction_high": high,
        f"{prefix}_fraction_low": low,
        f"{prefix}_std": _clamped_std(per_token, response_mask, option),
        **_sequence_metrics(prefix, seq_values[seq_valid], option),
        f"{prefix}_masked_fraction": verl_F.masked_mean((~token_keep).float(), response_mask).item(),
        f"{prefix}_seq_masked_fraction": (rejected_in_seq & seq_valid).float().sum().item()
        / max(int(seq_valid.sum()), 1),
    }


def _clamped_std(per_token: torch.Tensor, response_mask: torch.Tensor, option: RSOption) -> float:
    """Token-weighted std of the statistic clamped to [lower (0 for k2/k3), upper], as verl (outliers bounded).

    std = sqrt(max(mean(s²) − mean(s)², 0)) over valid tokens; 0 with at most one valid token.
    """
    if response_mask.sum() <= 1:
        return 0.0
    clamped = per_token.clamp(min=option.lower if option.lower is not None else 0.0, max=option.upper)
    mean = verl_F.masked_mean(clamped, response_mask)
    variance = verl_F.masked_mean(clamped.square(), response_mask) - mean.square()
    return variance.clamp(min=0.0).sqrt().item()


def _sequence_metrics(prefix: str, seq_values: torch.Tensor, option: RSOption) -> dict[str, float]:
    """``<prefix>_seq_*``: mean, std (unbiased), max, min, max |value|, shares above/below the bounds of the
    per-sequence values ``[S]`` (non-empty sequences only); ``_seq_fraction_low`` only for options with a lower
    bound (k1), as verl."""
    if seq_values.numel() == 0:
        names = ("mean", "std", "max", "min", "max_deviation", "fraction_high", "fraction_low")
        return {f"{prefix}_seq_{name}": 0.0 for name in names}
    metrics = {
        f"{prefix}_seq_mean": seq_values.mean().item(),
        f"{prefix}_seq_std": seq_values.std().item() if seq_values.numel() > 1 else 0.0,
        f"{prefix}_seq_max": seq_values.max().item(),
        f"{prefix}_seq_min": seq_values.min().item(),
        f"{prefix}_seq_max_deviation": seq_values.abs().max().item(),  # deviation from 0, the on-policy value
        f"{prefix}_seq_fraction_high": (seq_values > option.upper).float().mean().item(),
    }
    if option.lower is not None:
        metrics[f"{prefix}_seq_fraction_low"] = (seq_values < option.lower).float().mean().item()
    return metrics


def compute_rejection_mask(
    log_ratio: torch.Tensor, response_mask: torch.Tensor, options: tuple[RSOption, ...]
) -> tuple[torch.Tensor, dict[str, float]]:
    """The response mask with rejected tokens (token options) and sequences (sequence options) set to 0.

    Args:
        log_ratio: ``[B, T]`` log π_train − log π_rollout.
        response_mask: ``[B, T]`` m (needs at least one valid token).
        options: :func:`parse_rs_options`'s result.

    Returns:
        ``(mask [B, T]`` in ``response_mask``'s dtype, ``metrics`` without the ``rollout_corr/`` prefix:
        per option ``rollout_rs_<option>_*``, overall ``rollout_rs_masked_fraction`` (share of valid tokens
        rejected) and ``rollout_rs_seq_masked_fraction`` (share of sequences with a rejected token)).
    """
    estimates = divergence_estimates(log_ratio)
    keep_all = torch.ones_like(response_mask, dtype=torch.bool)
    metrics: dict[str, float] = {}
    for option in options:
        stat = _statistic(option, estimates[option.estimator], response_mask)
        keep = stat <= option.upper
        if option.lower is not None:
            keep = keep & (stat >= option.lower)
        metrics.update(_option_metrics(option, stat, keep, response_mask))
        keep_all = keep_all & (keep if keep.dim() == 2 else keep.unsqueeze(-1))
    valid = response_mask.bool()
    metrics["rollout_rs_masked_fraction"] = verl_F.masked_mean((~keep_all).float(), response_mask).item()
    metrics["rollout_rs_seq_masked_fraction"] = (~keep_all & valid).any(dim=-1).float().mean().item()
    return (response_mask * keep_all).to(response_mask.dtype), metrics
