"""Policy-gradient losses as pure functions with explicit hyper-parameters.

All share one signature, ``fn(old_log_prob, log_prob, advantages, response_mask, *, <hyper-parameters>)``,
and return ``(loss, metrics)``: ``loss`` is a differentiable scalar; ``metrics`` holds detached
scalars under verl's names (``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower``).
Which function a ``policy_loss.loss_mode`` selects, and with which hyper-parameters, is
``policy_loss_modes``; the verl-signature registry entries (``fn(old_log_prob, log_prob, advantages,
response_mask, loss_agg_mode, config)``) are thin adapters in ``hybridrl.trainer.ppo.core_algos``.

Papers → deviation from the paper:
    ppo_clip_loss  PPO (Schulman et al. 2017, arXiv 1707.06347) with asymmetric clip (DAPO, arXiv
                   2503.14476) and dual clip (Ye et al. 2019, arXiv 1912.09729); log ρ clamped to ±20.
    gspo_loss      Zheng et al. 2025, arXiv 2507.18071 → always seq-mean-token-mean; no dual clip.
    gpg_loss       Chu et al. 2025, arXiv 2504.02546 → −A·log π, no ratio.
    clip_cov_loss  Cui et al. 2025, arXiv 2505.22617 → random subset of high-covariance tokens detached.
    kl_cov_loss    Cui et al. 2025 → top-k covariance tokens get a |log ρ| penalty; no clipping.
    geo_mean_loss  GMPO, Zhao et al. 2025, arXiv 2507.20673 → sequence-level advantage = masked mean
                   of A; plain mean over sequences (``loss_agg_mode`` ignored), as verl.
    cispo_loss     MiniMax-M1, arXiv 2506.13585 → clipped ratio as a stop-gradient weight on A·log π.

    reinforce_loss REINFORCE (Williams 1992) → L = −A log π, optionally × the rollout IS weight (verl 0.9's
                   bypass-mode ``loss_type=reinforce``).

Rollout correction (verl 0.9, ``hybridrl.algos.rollout_correction``): every loss takes ``rollout_is_weights``
``[B, T]`` (or None) and multiplies its per-token loss by it before aggregation; GMPO, whose loss is per
sequence, multiplies by each sequence's geometric-mean weight. None leaves the loss bit-for-bit unchanged.

Global-batch normalisation (verl 0.9): every loss that aggregates with ``agg_loss`` takes ``global_batch``
(``aggregation.GlobalBatchInfo``: dp_size, batch_num_tokens, global_batch_size, loss_scale_factor), so a
micro-batch's loss is its share of the mini-batch loss; the default normalises by the micro-batch alone.
GMPO keeps a plain mean over the micro-batch's sequences, as verl 0.9 does (its gradient therefore still
grows with the number of micro-batches). SAPO, DPPO and DRO are in ``divergence_losses``.

Notation:
    B: batch size, T: response length; all tensors below are ``[B, T]`` unless stated.
    log π_old (old_log_prob), log π (log_prob): log-probs of the sampled tokens before / during the update.
    A: advantages, m: response mask.
    ρ = exp(log π − log π_old): importance ratio; ε_low, ε_high: clip_ratio_low / clip_ratio_high.
"""

from __future__ import annotations

import torch

from hybridrl.algos.aggregation import LOCAL_BATCH, GlobalBatchInfo, agg_loss
from hybridrl.utils import torch_functional as verl_F

__all__ = [
    "GSPO_MAX_LOG_RATIO",
    "LOG_RATIO_CLAMP",
    "Metrics",
    "cispo_loss",
    "clip_cov_loss",
    "geo_mean_loss",
    "gpg_loss",
    "gspo_loss",
    "kl_cov_loss",
    "ppo_clip_loss",
    "reinforce_loss",
]

# log ρ is clamped to ±20 before exp (vanilla PPO, CISPO): e^20 ≈ 4.9e8 is finite in fp32, while an
# unclamped log-ratio from a stale or degenerate token overflows to inf and turns −A·ρ into inf/NaN.
# ±20 is far outside any clip range, so the clamp never changes a clipped loss.
LOG_RATIO_CLAMP = 20.0
# GSPO clamps its token-combined log-ratio from above only, at 10 (verl): e^10 ≈ 2.2e4.
GSPO_MAX_LOG_RATIO = 10.0
# GMPO divides by the sequence length plus this, so an empty sequence gives 0 rather than NaN (verl).
GEO_MEAN_LENGTH_EPS = 1e-8
# ... and takes log(w + this) of the rollout IS weights, so a zeroed (IcePop) weight gives ~0, not −inf (verl).
GEO_MEAN_WEIGHT_EPS = 1e-10

Metrics = dict[str, torch.Tensor]


def _metrics(clipfrac: torch.Tensor, ppo_kl: torch.Tensor, clipfrac_lower: torch.Tensor) -> Metrics:
    return {
        "actor/pg_clipfrac": clipfrac.detach(),
        "actor/ppo_kl": ppo_kl.detach(),
        "actor/pg_clipfrac_lower": clipfrac_lower.detach(),
    }


def _zero(like: torch.Tensor) -> torch.Tensor:
    return torch.zeros((), dtype=like.dtype, device=like.device)


def _weighted(per_token: torch.Tensor, rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    """ℓ · w (rollout correction's IS weight, detached); ℓ itself when there are no weights."""
    return per_token if rollout_is_weights is None else per_token * rollout_is_weights


def ppo_clip_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """PPO clipped surrogate with asymmetric clip (DAPO clip-higher) and dual clip.

    L1 = −A ρ,  L2 = −A clip(ρ, 1 − ε_low, 1 + ε_high),  L = max(L1, L2)
    for A < 0 additionally L ← min(L, −A c)   (dual clip, Ye et al. 2019, c = clip_ratio_c > 1)

    Returns:
        loss ``[]`` = agg_loss(L); metrics: pg_clipfrac = mean_m[L2 > L1],
        ppo_kl = mean_m(log π_old − log π), pg_clipfrac_lower = mean_m[A < 0 and max(L1, L2) > −A c].
    """
    if not clip_ratio_c > 1.0:  # AssertionError: the type verl 0.5 raises here (its tests expect it)
        raise AssertionError(
            f"actor_rollout_ref.actor.clip_ratio_c (dual-clip bound) must be > 1.0, got {clip_ratio_c}."
        )
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    loss_dual_bound = -advantages * clip_ratio_c
    loss_dual = torch.min(loss_dual_bound, loss_ppo)
    per_token = _weighted(torch.where(advantages < 0, loss_dual, loss_ppo), rollout_is_weights)
    loss = agg_loss(per_token, response_mask, loss_agg_mode, **global_batch.as_kwargs())
    with torch.no_grad():
        ppo_kl = verl_F.masked_mean(-log_ratio, response_mask)
        clipfrac = verl_F.masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
        lower = torch.gt(loss_ppo, loss_dual_bound) * (advantages < 0).float()
        clipfrac_lower = verl_F.masked_mean(lower, response_mask)
    return loss, _metrics(clipfrac, ppo_kl, clipfrac_lower)


def gspo_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
) -> tuple[torch.Tensor, Metrics]:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071): sequence-level ratio, token-level gradient.

    log s_i = Σ_t m (log π − log π_old) / max(n_i, 1)
    log s_{i,t} = sg(log s_i) + log π − sg(log π)      (value s_i, gradient of log π_t), clamped ≤ 10
    L = max(−A s_{i,t}, −A clip(s_{i,t}, 1 − ε_low, 1 + ε_high)), always aggregated seq-mean-token-mean.

    Returns:
        loss ``[]``; metrics: pg_clipfrac, ppo_kl (unclamped token mean), pg_clipfrac_lower = 0.
    """
    log_ratio = log_prob - old_log_prob
    seq_lengths = torch.sum(response_mask, dim=-1).clamp(min=1)
    seq_log_ratio = torch.sum(log_ratio * response_mask, dim=-1) / seq_lengths
    token_log_ratio = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    seq_ratio = torch.exp(torch.clamp(token_log_ratio, max=GSPO_MAX_LOG_RATIO))
    loss_unclipped = -advantages * seq_ratio
    loss_clipped = -advantages * torch.clamp(seq_ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    per_token = _weighted(torch.maximum(loss_unclipped, loss_clipped), rollout_is_weights)
    loss = agg_loss(per_token, response_mask, "seq-mean-token-mean", **global_batch.as_kwargs())
    with torch.no_grad():
        clipfrac = verl_F.masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
        ppo_kl = verl_F.masked_mean(-log_ratio, response_mask)
    return loss, _metrics(clipfrac, ppo_kl, _zero(loss))


def gpg_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """GPG (Chu et al. 2025, arXiv 2504.02546): plain policy gradient, L = −A log π (no ratio, no clip).

    ``old_log_prob`` is not used; it keeps the one signature every loss of this module shares.

    Returns:
        loss ``[]``; no metrics (verl 0.9 reports none for GPG).
    """
    per_token = _weighted(-log_prob * advantages, rollout_is_weights)
    loss = agg_loss(per_token, response_mask, loss_agg_mode, **global_batch.as_kwargs())
    return loss, {}


def cispo_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    loss_agg_mode: str = "token-mean",
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """CISPO (MiniMax-M1, arXiv 2506.13585): clipped importance weight, gradient through log π only.

    L = −sg(clip(ρ, 1 − ε_low, 1 + ε_high)) · A · log π   (log ρ clamped to ±20 first)

    Returns:
        loss ``[]``; metrics: pg_clipfrac = mean_m[ρ was clipped], ppo_kl, pg_clipfrac_lower = 0.
    """
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    per_token = _weighted(-clipped_ratio.detach() * advantages * log_prob, rollout_is_weights)
    loss = agg_loss(per_token, response_mask, loss_agg_mode, **global_batch.as_kwargs())
    with torch.no_grad():
        clipfrac = verl_F.masked_mean((ratio != clipped_ratio).float(), response_mask)
        ppo_kl = verl_F.masked_mean(-log_ratio, response_mask)
    return loss, _metrics(clipfrac, ppo_kl, _zero(loss))


def geo_mean_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """GMPO (Zhao et al. 2025, arXiv 2507.20673): geometric mean of token ratios per sequence.

    Token clip in log space, pessimistic w.r.t. sign(A):
        ℓ_t = sign(A) · min(sign(A) δ_t, sign(A) clip(δ_t, −ε_low, ε_high)),  δ_t = log π − log π_old
    R_i = exp(Σ_t m ℓ_t / (n_i + 1e-8)),  Ā_i = Σ_t m A / (n_i + 1e-8),  loss = mean_i(−Ā_i R_i)
    (plain mean over sequences: ``loss_agg_mode`` does not apply, as in verl.)

    Returns:
        loss ``[]``; metrics: pg_clipfrac = mean_m[clipped and A > 0], ppo_kl,
        pg_clipfrac_lower = mean_m[clipped and A < 0].
    """
    log_ratio = log_prob - old_log_prob
    sign = torch.sign(advantages)
    log_ratio_clipped = torch.clamp(log_ratio, -clip_ratio_low, clip_ratio_high)
    pessimistic = sign * torch.min(sign * log_ratio, sign * log_ratio_clipped)
    lengths = response_mask.sum(dim=-1)
    seq_ratio = torch.exp((pessimistic * response_mask).sum(dim=-1) / (lengths + GEO_MEAN_LENGTH_EPS))
    seq_advantage = (advantages * response_mask).sum(dim=-1) / (lengths + GEO_MEAN_LENGTH_EPS)
    seq_loss = -seq_advantage * seq_ratio  # [B]
    if rollout_is_weights is not None:  # the sequence's geometric-mean weight: exp(Σ_t m log w / n) (verl)
        log_weights = torch.log(rollout_is_weights + GEO_MEAN_WEIGHT_EPS) * response_mask
        seq_loss = seq_loss * torch.exp(log_weights.sum(dim=-1) / (lengths + GEO_MEAN_LENGTH_EPS))
    loss = torch.mean(seq_loss)
    with torch.no_grad():
        clipped = torch.ne(log_ratio, log_ratio_clipped)
        ppo_kl = verl_F.masked_mean(-log_ratio, response_mask)
        clipfrac = verl_F.masked_mean((clipped * (advantages > 0)).float(), response_mask)
        clipfrac_lower = verl_F.masked_mean((clipped * (advantages < 0)).float(), response_mask)
    return loss, _metrics(clipfrac, ppo_kl, clipfrac_lower)


def _token_covariance(advantages: torch.Tensor, log_prob: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """cov_{i,t} = (A − mean_m A)(log π − mean_m log π): ``[B, T]`` (Cui et al. 2025, arXiv 2505.22617)."""
    return (advantages - verl_F.masked_mean(advantages, response_mask)) * (
        log_prob - verl_F.masked_mean(log_prob.detach(), response_mask)
    )


def clip_cov_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_cov_ratio: float = 0.0002,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    loss_agg_mode: str = "token-mean",
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
    generator: torch.Generator | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """Clip-Cov (Cui et al. 2025, arXiv 2505.22617): PPO-clip, plus a random few high-covariance
    tokens get no gradient.

    Among valid tokens not already clipped by PPO with cov ∈ (lb, ub), a random
    max(⌊clip_cov_ratio · Σm⌋, 1) of them are detached (their loss is multiplied by 0).
    ρ is not clamped here (as verl).

    Returns:
        loss ``[]``; metrics: pg_clipfrac = mean_m[token detached], ppo_kl (verl 0.9's two).
    """
    if not clip_cov_ratio > 0:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.clip_cov_ratio must be > 0, got {clip_cov_ratio}.")
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    with torch.no_grad():
        valid = response_mask > 0
        cov = _token_covariance(advantages, log_prob, response_mask)
        eligible = (cov > clip_cov_lb) & (cov < clip_cov_ub) & valid & ~(loss_clipped > loss_unclipped)
        candidates = torch.nonzero(eligible.reshape(-1)).squeeze(-1)
        num_clip = max(int(clip_cov_ratio * response_mask.sum().item()), 1)
        order = torch.randperm(candidates.numel(), generator=generator).to(candidates.device)
        chosen = candidates[order[:num_clip]]
        keep = torch.ones(advantages.numel(), dtype=advantages.dtype, device=advantages.device)
        keep[chosen] = 0
        keep = keep.view_as(advantages)
    per_token = _weighted(torch.maximum(loss_unclipped, loss_clipped) * keep, rollout_is_weights)
    loss = agg_loss(per_token, response_mask, loss_agg_mode, **global_batch.as_kwargs())
    with torch.no_grad():
        clipfrac = verl_F.masked_mean((keep == 0).float(), response_mask)
        ppo_kl = verl_F.masked_mean(-log_ratio, response_mask)
    return loss, {"actor/pg_clipfrac": clipfrac, "actor/ppo_kl": ppo_kl}  # verl 0.9 reports no clipfrac_lower


def kl_cov_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    kl_cov_ratio: float = 0.0002,
    ppo_kl_coef: float = 1.0,
    loss_agg_mode: str = "token-mean",
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """KL-Cov (Cui et al. 2025, arXiv 2505.22617): unclipped −A ρ, with a |log ρ| penalty on the
    top-k covariance tokens.

    k = max(⌊kl_cov_ratio · Σm⌋, 1) valid tokens with the largest cov get L = −A ρ + coef·|log ρ|;
    all others L = −A ρ. ρ is not clamped here (as verl).

    Returns:
        loss ``[]``; metrics: ppo_kl = mean_m |log ρ| only (verl 0.9 reports the absolute KL, nothing else).
    """
    if not kl_cov_ratio > 0:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.kl_cov_ratio must be > 0, got {kl_cov_ratio}.")
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    loss_plain = -advantages * ratio
    loss_penalised = loss_plain + ppo_kl_coef * log_ratio.abs()
    with torch.no_grad():
        valid_flat = torch.nonzero(response_mask.reshape(-1) > 0).squeeze(-1)
        selected = torch.zeros(advantages.numel(), dtype=torch.bool, device=advantages.device)
        if valid_flat.numel() > 0:
            adv_valid = advantages.reshape(-1)[valid_flat]
            logp_valid = log_prob.detach().reshape(-1)[valid_flat]
            # cov over valid tokens only: (A − mean A)(log π − mean log π)
            cov = (adv_valid - adv_valid.mean()) * (logp_valid - logp_valid.mean())
            top_k = max(1, int(valid_flat.numel() * kl_cov_ratio))
            selected[valid_flat[torch.topk(cov, top_k, largest=True).indices]] = True
        selected = selected.view_as(advantages)
    per_token = _weighted(torch.where(selected, loss_penalised, loss_plain), rollout_is_weights)
    loss = agg_loss(per_token, response_mask, loss_agg_mode, **global_batch.as_kwargs())
    with torch.no_grad():
        ppo_kl_abs = verl_F.masked_mean(log_ratio.abs(), response_mask)
    return loss, {"actor/ppo_kl": ppo_kl_abs}  # verl 0.9 reports only this one


def reinforce_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """REINFORCE with an optional rollout IS weight: L = −w · A · log π   (w = 1 without weights).

    verl 0.9's bypass-mode ``loss_type=reinforce``: no ratio, no clipping; ``old_log_prob`` is the rollout's.

    Returns:
        loss ``[]``; metrics: ppo_kl = mean_m(log π_old − log π) (verl reports only this one).
    """
    loss, _ = gpg_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, global_batch,
                       rollout_is_weights)  # the same loss: −w·A·log π; only the metrics differ
    with torch.no_grad():
        ppo_kl = verl_F.masked_mean(old_log_prob - log_prob, response_mask)
    return loss, {"actor/ppo_kl": ppo_kl.detach()}
