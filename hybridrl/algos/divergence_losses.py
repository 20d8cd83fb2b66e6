"""Policy losses that bound the update by a divergence or a smooth gate instead of PPO's ratio clip (verl 0.9).

Same signature and return as ``policy_losses``: ``fn(old_log_prob, log_prob, advantages, response_mask, *,
<hyper-parameters>, rollout_is_weights=None, global_batch=LOCAL_BATCH) -> (loss, metrics)``.

Papers → deviation from the paper (verl 0.9's choices, kept):
    sapo_loss      SAPO, arXiv 2511.20347: a sigmoid gate of the token ratio replaces the hard clip, with a
                   temperature per advantage sign; always aggregated seq-mean-token-mean.
    dppo_tv_loss   DPPO-Binary-TV, arXiv 2602.04879: policy gradient −A·w·log π with w the ratio truncated at
    dppo_kl_loss   clip_ratio_c (stop-gradient), on the tokens whose binary TV / binary KL divergence between
                   π(token) and π_old(token) stays inside the trust region in the direction A pushes. The
                   thresholds are ``clip_ratio_low`` / ``clip_ratio_high`` (divergences, not ratio bounds).
    dro_loss       Direct Reward Optimization: −(A log π − ½ β (log π − log π_old)²), β = ``policy_loss.dro_beta``.

Notation:
    B: batch size, T: response length; all tensors ``[B, T]``.
    log π_old, log π: log-probs of the sampled tokens before / during the update; p = π(token), p_old = π_old(token).
    A: advantages, m: response mask, ρ = exp(clamp(log π − log π_old, ±20)): the token ratio.
    δ_low, δ_high: the divergence thresholds (``clip_ratio_low`` / ``clip_ratio_high``); c: ``clip_ratio_c``.
"""

from __future__ import annotations

import torch

from hybridrl.algos.aggregation import LOCAL_BATCH, GlobalBatchInfo, agg_loss
from hybridrl.algos.policy_losses import LOG_RATIO_CLAMP, Metrics
from hybridrl.utils import torch_functional as verl_F

__all__ = ["BINARY_KL_EPS", "DPPO_TRUNCATION", "dppo_kl_loss", "dppo_tv_loss", "dro_loss", "sapo_loss"]

# DPPO truncates its importance weight at clip_ratio_c; verl falls back to 20 when the key is absent (the
# shipped YAML sets clip_ratio_c = 3.0, so a composed config truncates at 3 unless the user raises it).
DPPO_TRUNCATION = 20.0
# the binary KL takes log((1 − p_old + ε) / (1 − p + ε)): finite when a token's probability reaches 1 (verl)
BINARY_KL_EPS = 1e-8


def _clamped_log_ratio(old_log_prob: torch.Tensor, log_prob: torch.Tensor) -> torch.Tensor:
    return torch.clamp(log_prob - old_log_prob, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)


def _weighted(per_token: torch.Tensor, rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    return per_token if rollout_is_weights is None else per_token * rollout_is_weights


def sapo_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
) -> tuple[torch.Tensor, Metrics]:
    """SAPO: soft-gated policy gradient.

    τ = τ_pos where A > 0 else τ_neg;  f(ρ) = σ(τ (ρ − 1)) · 4 / τ;  L = −f(ρ) · A, aggregated seq-mean-token-mean.
    At ρ = 1 the gate's slope is σ'(0) · 4 = 1, so the gradient there is PPO's: −A ∇ log π.

    Returns:
        loss ``[]``; metrics: pg_clipfrac = 0, ppo_kl = mean_m(log π_old − log π) (clamped), pg_clipfrac_lower = 0.
    """
    log_ratio = _clamped_log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    tau = torch.where(
        advantages > 0,
        torch.as_tensor(tau_pos, dtype=advantages.dtype, device=advantages.device),
        torch.as_tensor(tau_neg, dtype=advantages.dtype, device=advantages.device),
    )
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    per_token = _weighted(-gate * advantages, rollout_is_weights)
    loss = agg_loss(per_token, response_mask, "seq-mean-token-mean", **global_batch.as_kwargs())
    zero = torch.zeros((), dtype=loss.dtype, device=loss.device)
    with torch.no_grad():
        ppo_kl = verl_F.masked_mean(-log_ratio, response_mask)
    return loss, {"actor/pg_clipfrac": zero, "actor/ppo_kl": ppo_kl, "actor/pg_clipfrac_lower": zero}


def _dppo_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    inside: torch.Tensor,
    clip_ratio_c: float,
    loss_agg_mode: str,
    rollout_is_weights: torch.Tensor | None,
    global_batch: GlobalBatchInfo,
) -> tuple[torch.Tensor, Metrics]:
    """The DPPO loss given the trust-region mask ``inside`` ``[B, T]`` (bool, no gradient).

    w = sg(min(ρ, c));  L = −A · w · log π · [inside]

    Returns:
        loss ``[]``; metrics: pg_clipfrac = mean_m[outside], pg_clipfrac_lower = mean_m[ρ > c and inside],
        ppo_kl = mean_m(log π_old − log π) (clamped).
    """
    log_ratio = _clamped_log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    truncated = torch.clamp(ratio, max=clip_ratio_c).detach()
    valid = inside.detach().float()
    per_token = _weighted(-advantages * truncated * log_prob * valid, rollout_is_weights)
    loss = agg_loss(per_token, response_mask, loss_agg_mode, **global_batch.as_kwargs())
    with torch.no_grad():
        clipfrac = verl_F.masked_mean(1.0 - valid, response_mask)
        clipfrac_lower = verl_F.masked_mean((ratio > clip_ratio_c).float() * valid, response_mask)
        ppo_kl = verl_F.masked_mean(-log_ratio, response_mask)
    return loss, {"actor/pg_clipfrac": clipfrac, "actor/ppo_kl": ppo_kl, "actor/pg_clipfrac_lower": clipfrac_lower}


def dppo_tv_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float = DPPO_TRUNCATION,
    loss_agg_mode: str = "token-mean",
    rollout_is_weights: torch.Tensor | None = None,
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
) -> tuple[torch.Tensor, Metrics]:
    """DPPO-Binary-TV: inside = (p − p_old ≤ δ_high) where A > 0, else (p − p_old ≥ −δ_low); see ``_dppo_loss``."""
    with torch.no_grad():
        prob_gain = torch.exp(log_prob) - torch.exp(old_log_prob)  # p − p_old
        inside = torch.where(advantages > 0, prob_gain <= clip_ratio_high, prob_gain >= -clip_ratio_low)
    return _dppo_loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        inside,
        clip_ratio_c,
        loss_agg_mode,
        rollout_is_weights,
        global_batch,
    )


def dppo_kl_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float = DPPO_TRUNCATION,
    loss_agg_mode: str = "token-mean",
    rollout_is_weights: torch.Tensor | None = None,
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
) -> tuple[torch.Tensor, Metrics]:
    """DPPO-Binary-KL: the KL between the Bernoulli(p_old) and Bernoulli(p) of "this token or another",

    KL_b = p_old (log p_old − log p) + (1 − p_old) log((1 − p_old + ε) / (1 − p + ε)),
    inside = (KL_b ≤ δ_high or p ≤ p_old) where A > 0, else (KL_b ≤ δ_low or p ≥ p_old): a token moving against
    A's push is always kept. See ``_dppo_loss``.
    """
    with torch.no_grad():
        prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
        binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
            (1.0 - old_prob + BINARY_KL_EPS) / (1.0 - prob + BINARY_KL_EPS)
        )
        inside_pos = (binary_kl <= clip_ratio_high) | (prob <= old_prob)
        inside_neg = (binary_kl <= clip_ratio_low) | (prob >= old_prob)
        inside = torch.where(advantages > 0, inside_pos, inside_neg)
    return _dppo_loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        inside,
        clip_ratio_c,
        loss_agg_mode,
        rollout_is_weights,
        global_batch,
    )


def dro_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    dro_beta: float | None = None,
    loss_agg_mode: str = "token-mean",
    rollout_is_weights: torch.Tensor | None = None,
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
) -> tuple[torch.Tensor, Metrics]:
    """Direct Reward Optimization: L = −(A · log π − ½ β (log π − log π_old)²)   (log-ratio not clamped, as verl).

    Returns:
        loss ``[]``; metrics: ppo_kl = mean_m(log π_old − log π) only (verl 0.9's).

    Raises:
        ValueError: β missing or ≤ 0 (names ``policy_loss.dro_beta``).
    """
    if dro_beta is None or not dro_beta > 0:
        raise ValueError(
            f"policy_loss.dro_beta must be a positive value when using DRO, got {dro_beta!r}: set "
            "actor_rollout_ref.actor.policy_loss.dro_beta=<β > 0>."
        )
    log_ratio = log_prob - old_log_prob
    per_token = _weighted(-(log_prob * advantages - 0.5 * dro_beta * log_ratio.square()), rollout_is_weights)
    loss = agg_loss(per_token, response_mask, loss_agg_mode, **global_batch.as_kwargs())
    with torch.no_grad():
        ppo_kl = verl_F.masked_mean(-log_ratio, response_mask)
    return loss, {"actor/ppo_kl": ppo_kl}
