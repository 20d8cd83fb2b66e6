"""Core PPO-family algorithms: advantage estimators, policy losses, KL, value and entropy losses.

Pure tensor math (numerics of verl v0.5.0; estimators and losses added after v0.5.0 follow verl's
latest code). The math lives in sibling modules, one vectorised implementation each:
``advantage_estimators``, ``policy_losses``, ``loss_aggregation``, ``kl_control``. This module is
verl's public surface: it re-exports the registries (module-level dicts keyed by verl's strings,
defined in ``registry``), the ``AdvantageEstimator`` enum, the policy-loss entry points
(``policy_loss_registry``), and defines the estimator entry points: thin adapters with verl's
signatures that read hyper-parameters from a config and call the pure functions.

Advantage estimators (``algorithm.adv_estimator``), paper → deviation from the paper:
    gae             Schulman et al. 2015, arXiv 1506.02438 → masked tokens are skipped in the
                    recursion; advantages whitened over the batch's valid tokens (returns are not).
    grpo            Shao et al. 2024, arXiv 2402.03300 → outcome reward only; σ is torch.std
                    (unbiased) plus ε = 1e-6; a lone response per prompt gets μ = 0, σ = 1.
                    ``norm_adv_by_std_in_grpo=False`` is Dr.GRPO (Liu et al. 2025, arXiv 2503.20783).
    grpo_passk      Chen et al. 2025, arXiv 2503.19595 → only the best response of each group gets
                    r_max − r_2nd (÷ σ + ε when normalising); needs ≥ 2 responses per prompt.
    rloo            Ahmadian et al. 2024, arXiv 2402.14740 → a lone response keeps its raw score.
    reinforce_plus_plus           Hu 2025, arXiv 2501.03262 → returns whitened over the batch.
    reinforce_plus_plus_baseline  Hu 2025 → group-mean baseline, then batch whitening.
    remax           Li et al. 2023, arXiv 2310.10505 → baseline = reward of the greedy response.
    opo             Hao et al. 2025, arXiv 2505.23585 → length-weighted group-mean baseline.
    gpg             Chu et al. 2025, arXiv 2504.02546 → α = B / #nonzero scores, f_norm = 1
                    (no std normalisation).

Policy losses (``actor_rollout_ref.actor.policy_loss.loss_mode``):
    vanilla     PPO (Schulman et al. 2017, arXiv 1707.06347) with asymmetric clip (DAPO, arXiv
                2503.14476) and dual clip (Ye et al. 2019, arXiv 1912.09729); log ρ clamped to ±20.
    gspo        Zheng et al. 2025, arXiv 2507.18071 → always seq-mean-token-mean; no dual clip.
    gpg         Chu et al. 2025 → −A·log π, no ratio.
    clip_cov    Cui et al. 2025, arXiv 2505.22617 → random subset of high-covariance tokens detached.
    kl_cov      Cui et al. 2025 → top-k covariance tokens get a |log ρ| penalty; no clipping.
    geo_mean    GMPO, Zhao et al. 2025, arXiv 2507.20673 → sequence-level advantage = masked mean of A;
                plain mean over sequences (``loss_agg_mode`` ignored), as verl.
    cispo       MiniMax-M1, arXiv 2506.13585 → clipped ratio as a stop-gradient weight on A·log π.

Not ported (later verl only): the global-batch ``agg_loss`` arguments (dp_size, batch_num_tokens),
``rollout_is_weights``, and the optimal-token-baseline / GDPO / SAPO / DPPO families.

Notation (shapes): B = batch size, T = response length; token tensors ``[B, T]``, scores ``[B]``.
"""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.trainer.ppo import advantage_estimators as adv
from hybridrl.trainer.ppo.advantage_estimators import GroupIndex, compute_gae_advantage_return
from hybridrl.trainer.ppo.dpo_losses import DPO_LOSS_REGISTRY, compute_dpo_loss, get_dpo_loss_fn
from hybridrl.trainer.ppo.kl_control import (
    AdaptiveKLController,
    FixedKLController,
    get_kl_controller,
    kl_penalty,
    kl_penalty_forward,
)
from hybridrl.trainer.ppo.loss_aggregation import LOSS_AGG_MODES, agg_loss
from hybridrl.trainer.ppo.policy_loss_registry import (
    compute_policy_loss,
    compute_policy_loss_cispo,
    compute_policy_loss_clip_cov,
    compute_policy_loss_geo_mean,
    compute_policy_loss_gpg,
    compute_policy_loss_gspo,
    compute_policy_loss_kl_cov,
    compute_policy_loss_vanilla,
)
from hybridrl.trainer.ppo.registry import (
    ADV_ESTIMATOR_REGISTRY,
    POLICY_LOSS_REGISTRY,
    AdvantageEstimator,
    config_value,
    get_adv_estimator_fn,
    get_policy_loss_fn,
    register_adv_est,
    register_policy_loss,
)
from hybridrl.utils import torch_functional as verl_F

__all__ = [
    "DPO_LOSS_REGISTRY",
    "compute_dpo_loss",
    "get_dpo_loss_fn",
    "ADV_ESTIMATOR_REGISTRY",
    "LOSS_AGG_MODES",
    "POLICY_LOSS_REGISTRY",
    "AdaptiveKLController",
    "AdvantageEstimator",
    "FixedKLController",
    "agg_loss",
    "compute_entropy_loss",
    "compute_gae_advantage_return",
    "compute_gpg_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_policy_loss",
    "compute_policy_loss_cispo",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_gpg",
    "compute_policy_loss_gspo",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_vanilla",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rewards",
    "compute_rloo_outcome_advantage",
    "compute_value_loss",
    "get_adv_estimator_fn",
    "get_kl_controller",
    "get_policy_loss_fn",
    "kl_penalty",
    "kl_penalty_forward",
    "register_adv_est",
    "register_policy_loss",
]

# ---------------------------------------------------------------------------
# Advantage estimators: verl-signature adapters over advantage_estimators.py
# ---------------------------------------------------------------------------

register_adv_est(AdvantageEstimator.GAE)(compute_gae_advantage_return)


@register_adv_est(AdvantageEstimator.GRPO)
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    epsilon: float = adv.GROUP_STD_EPSILON,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO / Dr.GRPO; see ``advantage_estimators.grpo_outcome_advantage``. ``[B, T]`` → 2 × ``[B, T]``.

    As in verl, the argument decides (``config`` is not read); the driver passes
    ``algorithm.norm_adv_by_std_in_grpo`` explicitly.
    """
    return adv.grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo)


@register_adv_est(AdvantageEstimator.GRPO_PASSK)
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    epsilon: float = adv.GROUP_STD_EPSILON,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k GRPO; ``config.norm_adv_by_std_in_grpo`` wins over the argument (verl reads the config)."""
    norm = bool(config_value(config, "norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo))
    return adv.grpo_passk_outcome_advantage(token_level_rewards, response_mask, index, epsilon, norm)


@register_adv_est(AdvantageEstimator.RLOO)
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: GroupIndex, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO leave-one-out baseline. ``[B, T]`` → 2 × ``[B, T]``."""
    return adv.rloo_outcome_advantage(token_level_rewards, response_mask, index)


@register_adv_est(AdvantageEstimator.OPO)
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: GroupIndex, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO length-weighted baseline. ``[B, T]`` → 2 × ``[B, T]``."""
    return adv.opo_outcome_advantage(token_level_rewards, response_mask, index)


@register_adv_est(AdvantageEstimator.GPG)
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    f_norm: float = 1.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG rescaled group-centred score. ``[B, T]`` → 2 × ``[B, T]``."""
    return adv.gpg_outcome_advantage(token_level_rewards, response_mask, index, f_norm)


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE)
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: GroupIndex, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline. ``[B, T]`` → 2 × ``[B, T]``."""
    return adv.reinforce_plus_plus_baseline_advantage(token_level_rewards, response_mask, index)


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with γ = ``config.gamma`` (``algorithm.gamma``). ``[B, T]`` → 2 × ``[B, T]``."""
    gamma = config_value(config, "gamma")
    if gamma is None:
        raise ValueError("reinforce_plus_plus reads algorithm.gamma: pass the algorithm config as `config`.")
    return adv.reinforce_plus_plus_advantage(token_level_rewards, response_mask, float(gamma))


@register_adv_est(AdvantageEstimator.REMAX)
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor, reward_baselines: torch.Tensor, response_mask: torch.Tensor, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: return-to-go minus the greedy baseline ``reward_baselines`` ``[B]``."""
    return adv.remax_outcome_advantage(token_level_rewards, reward_baselines, response_mask)


# ---------------------------------------------------------------------------
# Value, entropy and legacy reward helpers
# ---------------------------------------------------------------------------


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss (PPO2 style).

    V_clip = clip(V_pred, V_old − c, V_old + c);  L = ½ · agg(max((V_pred − R)², (V_clip − R)²))

    Args:
        vpreds: ``[B, T]`` new predictions. returns: ``[B, T]`` R. values: ``[B, T]`` V_old.
        response_mask: ``[B, T]``. cliprange_value: c (``critic.cliprange_value``).

    Returns:
        vf_loss ``[]``; vf_clipfrac ``[]`` = mean_m[(V_clip − R)² > (V_pred − R)²].
    """
    vpreds_clipped = verl_F.clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    loss_unclipped = (vpreds - returns) ** 2
    loss_clipped = (vpreds_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.max(loss_unclipped, loss_clipped), response_mask, loss_agg_mode, loss_scale_factor)
    with torch.no_grad():
        vf_clipfrac = verl_F.masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
    return vf_loss, vf_clipfrac


def compute_entropy_loss(
    logits: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str = "token-mean"
) -> torch.Tensor:
    """Aggregated categorical entropy: logits ``[B, T, V]``, mask ``[B, T]`` → ``[]``."""
    return agg_loss(verl_F.entropy_from_logits(logits), response_mask, loss_agg_mode)


def compute_rewards(
    token_level_scores: torch.Tensor, old_log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_ratio: float
) -> torch.Tensor:
    """Legacy in-reward KL: r = score − kl_ratio · (log π_old − log π_ref), all ``[B, T]``."""
    return token_level_scores - (old_log_prob - ref_log_prob) * kl_ratio
