"""verl-signature policy-loss entry points, registered in ``POLICY_LOSS_REGISTRY``.

Each is a thin adapter: it reads the hyper-parameters from the actor config
(``actor_rollout_ref.actor``: ``clip_ratio[_low|_high]``, ``clip_ratio_c``, ``policy_loss.*``,
optional ``loss_scale_factor``) and calls the pure function in ``policy_losses``. The return value
is verl v0.5.0's 4-tuple ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``; the pure functions
return ``(loss, metrics)`` with the same values under ``actor/…`` keys.

Signature (the user extension point, as verl):
    fn(old_log_prob [B, T], log_prob [B, T], advantages [B, T], response_mask [B, T],
       loss_agg_mode: str, config) -> (pg_loss [], pg_clipfrac [], ppo_kl [], pg_clipfrac_lower [])
"""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.trainer.ppo import policy_losses as pl
from hybridrl.trainer.ppo.registry import clip_ratios_from_config, config_value, register_policy_loss

__all__ = [
    "compute_policy_loss",
    "compute_policy_loss_cispo",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_gpg",
    "compute_policy_loss_gspo",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_vanilla",
]


def _as_v05_tuple(result: tuple[torch.Tensor, dict[str, torch.Tensor]]) -> tuple[torch.Tensor, ...]:
    loss, metrics = result
    return loss, metrics["actor/pg_clipfrac"], metrics["actor/ppo_kl"], metrics["actor/pg_clipfrac_lower"]


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
) -> tuple[torch.Tensor, ...]:
    """PPO clip + dual clip from the actor config. Returns (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)."""
    low, high = clip_ratios_from_config(config, "vanilla")
    clip_ratio_c = float(config_value(config, "clip_ratio_c", 3.0))
    scale = config_value(config, "loss_scale_factor")
    return _as_v05_tuple(
        pl.ppo_clip_loss(
            old_log_prob, log_prob, advantages, response_mask, low, high, clip_ratio_c, loss_agg_mode, scale
        )
    )


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
) -> tuple[torch.Tensor, ...]:
    """GSPO (always seq-mean-token-mean, whatever ``loss_agg_mode`` says, as verl)."""
    low, high = clip_ratios_from_config(config, "gspo")
    return _as_v05_tuple(pl.gspo_loss(old_log_prob, log_prob, advantages, response_mask, low, high))


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
) -> tuple[torch.Tensor, ...]:
    """GPG: −A·log π, aggregated with ``loss_agg_mode``; the three metrics are 0."""
    scale = config_value(config, "loss_scale_factor")
    return _as_v05_tuple(pl.gpg_loss(log_prob, advantages, response_mask, loss_agg_mode, scale))


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
) -> tuple[torch.Tensor, ...]:
    """Clip-Cov with ``policy_loss.clip_cov_{ratio,lb,ub}`` (defaults 2e-4, 1, 5)."""
    low, high = clip_ratios_from_config(config, "clip_cov")
    policy_loss = config_value(config, "policy_loss")
    return _as_v05_tuple(
        pl.clip_cov_loss(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            low,
            high,
            clip_cov_ratio=float(config_value(policy_loss, "clip_cov_ratio", 0.0002)),
            clip_cov_lb=float(config_value(policy_loss, "clip_cov_lb", 1.0)),
            clip_cov_ub=float(config_value(policy_loss, "clip_cov_ub", 5.0)),
            loss_agg_mode=loss_agg_mode,
            loss_scale_factor=config_value(config, "loss_scale_factor"),
        )
    )


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
) -> tuple[torch.Tensor, ...]:
    """KL-Cov with ``policy_loss.kl_cov_ratio`` / ``ppo_kl_coef`` (function defaults 2e-4 / 1.0, as verl)."""
    policy_loss = config_value(config, "policy_loss")
    return _as_v05_tuple(
        pl.kl_cov_loss(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            kl_cov_ratio=float(config_value(policy_loss, "kl_cov_ratio", 0.0002)),
            ppo_kl_coef=float(config_value(policy_loss, "ppo_kl_coef", 1.0)),
            loss_agg_mode=loss_agg_mode,
            loss_scale_factor=config_value(config, "loss_scale_factor"),
        )
    )


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
) -> tuple[torch.Tensor, ...]:
    """GMPO geometric-mean ratio (``loss_agg_mode`` is not used, as verl)."""
    low, high = clip_ratios_from_config(config, "geo_mean")
    return _as_v05_tuple(pl.geo_mean_loss(old_log_prob, log_prob, advantages, response_mask, low, high))


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
) -> tuple[torch.Tensor, ...]:
    """CISPO: stop-gradient clipped ratio times −A·log π."""
    low, high = clip_ratios_from_config(config, "cispo")
    scale = config_value(config, "loss_scale_factor")
    return _as_v05_tuple(
        pl.cispo_loss(old_log_prob, log_prob, advantages, response_mask, low, high, loss_agg_mode, scale)
    )


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: float | None = None,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, ...]:
    """The v0.4 API of the vanilla loss (explicit clip ranges). Returns the same 4-tuple."""
    low = cliprange if cliprange_low is None else cliprange_low
    high = cliprange if cliprange_high is None else cliprange_high
    if low is None or high is None:
        raise ValueError("compute_policy_loss needs cliprange (or cliprange_low and cliprange_high).")
    return _as_v05_tuple(
        pl.ppo_clip_loss(old_log_prob, log_prob, advantages, response_mask, low, high, clip_ratio_c, loss_agg_mode)
    )
