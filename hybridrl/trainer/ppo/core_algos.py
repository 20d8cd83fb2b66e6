"""verl's ``core_algos``: the registries and verl's signatures, over the pure math of ``hybridrl.algos``.

Users and recipes import this module exactly as in verl 0.5: the ``AdvantageEstimator`` enum, the
registries ``ADV_ESTIMATOR_REGISTRY`` / ``POLICY_LOSS_REGISTRY`` (module globals, looked up by
``register_adv_est`` / ``get_adv_estimator_fn`` / ``register_policy_loss`` / ``get_policy_loss_fn`` at
call time, so rebinding or clearing them here is seen as in verl), the estimator and policy-loss
entry points with verl's signatures, ``agg_loss``, ``kl_penalty``, the KL controllers, value and
entropy losses. Every entry point is a thin adapter: it reads its hyper-parameters from the config or
arguments it is given and calls one pure function of ``hybridrl.algos``, where the math, the papers
and the deviations from them are written down.

Signatures (the user extension points, as verl 0.5):
    estimator:   fn(token_level_rewards [B, T], response_mask [B, T], index [B], ..., config, **kwargs)
                 -> (advantages [B, T], returns [B, T])
    policy loss: fn(old_log_prob [B, T], log_prob [B, T], advantages [B, T], response_mask [B, T],
                    loss_agg_mode: str, config, rollout_is_weights=None) -> (pg_loss [], metrics {name: float})
                 (verl 0.9's shape; the actor also accepts a user loss returning verl 0.5's 4-tuple
                 (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)). The built-in losses normalise by
                 ``config.global_batch_info`` (verl 0.9: dp_size, batch_num_tokens, global_batch_size,
                 loss_scale_factor), which the actor fills per mini-batch; absent, by the micro-batch alone.

``POLICY_LOSS_REGISTRY`` is the dict ``hybridrl.algos.policy_loss_modes`` holds, so the actor (which
imports only ``hybridrl.algos``) sees the losses users register here; it calls the pure loss for the
built-in modes and verl's 4-tuple adapter only for user-registered losses.

Not ported: ``compute_pf_ppo_reweight_data`` takes a ``DataProto`` and lives with the driver's
batch helpers (``hybridrl.trainer.ppo.batch_advantage``).

Notation (shapes): B = batch size, T = response length; token tensors ``[B, T]``, scores ``[B]``.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

import torch

from hybridrl.algos import advantages as adv
from hybridrl.algos.advantages import GroupIndex, compute_gae_advantage_return
from hybridrl.algos.aggregation import LOSS_AGG_MODES, GlobalBatchInfo, agg_loss
from hybridrl.algos.dpo_losses import DPO_LOSS_REGISTRY, compute_dpo_loss, get_dpo_loss_fn
from hybridrl.algos.kl import AdaptiveKLController, FixedKLController, kl_penalty, kl_penalty_forward
from hybridrl.algos.params import config_value, global_batch_info, policy_loss_params
from hybridrl.algos.policy_loss_modes import (
    POLICY_LOSS_REGISTRY,
    VerlLossTuple,
    VerlPolicyLossFn,
    as_verl_tuple,
    bind_policy_loss,
    mark_builtin_adapter,
)
from hybridrl.algos.policy_losses import ppo_clip_loss
from hybridrl.algos.reward_components import gdpo_reward_components
from hybridrl.algos.token_baseline import (
    OTB_EPSILON,
    optimal_token_baseline_advantage,
    tir_optimal_token_baseline_advantage,
)
from hybridrl.algos.value_loss import clipped_value_loss
from hybridrl.utils import torch_functional as verl_F

__all__ = [
    "ADV_ESTIMATOR_REGISTRY",
    "DPO_LOSS_REGISTRY",
    "LOSS_AGG_MODES",
    "POLICY_LOSS_REGISTRY",
    "AdaptiveKLController",
    "AdvantageEstimator",
    "FixedKLController",
    "agg_loss",
    "compute_dpo_loss",
    "compute_entropy_loss",
    "compute_gae_advantage_return",
    "compute_gdpo_outcome_advantage",
    "compute_gpg_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_multi_turn_optimal_token_baseline_advantage",
    "compute_opo_outcome_advantage",
    "compute_optimal_token_baseline_advantage",
    "compute_policy_loss",
    "compute_policy_loss_cispo",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_dppo_kl",
    "compute_policy_loss_dppo_tv",
    "compute_policy_loss_dro",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_gpg",
    "compute_policy_loss_gspo",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_sapo",
    "compute_policy_loss_vanilla",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rewards",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_value_loss",
    "get_adv_estimator_fn",
    "get_dpo_loss_fn",
    "get_kl_controller",
    "get_policy_loss_fn",
    "kl_penalty",
    "kl_penalty_forward",
    "register_adv_est",
    "register_policy_loss",
]

AdvantageFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]

# ---------------------------------------------------------------------------
# Registries: module globals, read by the four functions below at call time
# ---------------------------------------------------------------------------

ADV_ESTIMATOR_REGISTRY: dict[str, AdvantageFn] = {}
# POLICY_LOSS_REGISTRY (imported above) is hybridrl.algos.policy_loss_modes' dict, published here.


class AdvantageEstimator(str, Enum):
    """The built-in estimators; values are verl's ``algorithm.adv_estimator`` strings."""

    GAE = "gae"
    GRPO = "grpo"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    REMAX = "remax"
    RLOO = "rloo"
    OPO = "opo"
    GRPO_PASSK = "grpo_passk"
    GPG = "gpg"
    RLOO_VECTORIZED = "rloo_vectorized"
    GRPO_VECTORIZED = "grpo_vectorized"
    OPTIMAL_TOKEN_BASELINE = "optimal_token_baseline"
    TIR_OPTIMAL_TOKEN_BASELINE = "tir_optimal_token_baseline"
    GDPO = "gdpo"


def _name_of(name_or_enum: str | Enum) -> str:
    return str(name_or_enum.value) if isinstance(name_or_enum, Enum) else name_or_enum


def register_adv_est(name_or_enum: str | Enum) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator registering an advantage estimator under a name (or an enum member's value).

    Raises:
        ValueError: if a different function is already registered under that name (the same one is fine).
    """

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        name = _name_of(name_or_enum)
        if name in ADV_ESTIMATOR_REGISTRY and ADV_ESTIMATOR_REGISTRY[name] is not fn:
            raise ValueError(f"Adv estimator {name!r} is already registered: {ADV_ESTIMATOR_REGISTRY[name]} vs {fn}")
        ADV_ESTIMATOR_REGISTRY[name] = fn
        return fn

    return decorator


def get_adv_estimator_fn(name_or_enum: str | Enum) -> AdvantageFn:
    """Look up an estimator (case-sensitive). Raises ValueError with verl's wording, naming the valid ones."""
    name = _name_of(name_or_enum)
    if name not in ADV_ESTIMATOR_REGISTRY:
        raise ValueError(
            f"Unknown advantage estimator simply: {name}. Valid estimators: {sorted(ADV_ESTIMATOR_REGISTRY)}. "
            "Set algorithm.adv_estimator to one of them, or register yours with @register_adv_est."
        )
    return ADV_ESTIMATOR_REGISTRY[name]


def register_policy_loss(name: str) -> Callable[[VerlPolicyLossFn], VerlPolicyLossFn]:
    """Decorator registering a verl-signature policy loss under ``name`` (``policy_loss.loss_mode``).

    As in verl, a later registration under the same name replaces the earlier one.
    """

    def decorator(fn: VerlPolicyLossFn) -> VerlPolicyLossFn:
        POLICY_LOSS_REGISTRY[name] = fn
        return fn

    return decorator


def get_policy_loss_fn(name: str) -> VerlPolicyLossFn:
    """Look up a policy loss. Raises ValueError with verl's wording, naming the valid loss modes."""
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(
            f"Unsupported loss mode: {name}. Supported modes are: {sorted(POLICY_LOSS_REGISTRY)} "
            "(actor_rollout_ref.actor.policy_loss.loss_mode)."
        )
    return POLICY_LOSS_REGISTRY[name]


# ---------------------------------------------------------------------------
# Advantage estimators (pure math: hybridrl.algos.advantages)
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
    """GRPO / Dr.GRPO (``advantages.grpo_outcome_advantage``). As verl, the argument decides, not ``config``."""
    return adv.grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo)


# verl 0.9's loop-free GRPO is the same math as ``grpo`` here (every estimator is vectorised): one function, two names.
compute_grpo_vectorized_outcome_advantage = register_adv_est(AdvantageEstimator.GRPO_VECTORIZED)(
    compute_grpo_outcome_advantage
)


@register_adv_est(AdvantageEstimator.GDPO)
def compute_gdpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    epsilon: float = adv.GROUP_STD_EPSILON,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    non_tensor_batch: Any = None,
    batch: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO (``advantages.gdpo_outcome_advantage``) over the components ``algorithm.gdpo_reward_keys`` names.

    The components are ``non_tensor_batch[key]`` ``[B]`` (what ``compute_score`` returned in its dict) and
    weighted by ``algorithm.gdpo_reward_weights``. As in verl, without ``config``, ``non_tensor_batch`` and
    ``batch`` the sequence score Σ_t r_t is the one component (then GDPO = whitened GRPO).
    """
    components: torch.Tensor = token_level_rewards.sum(dim=-1, keepdim=True)
    weights = None
    if config is not None and non_tensor_batch is not None and batch is not None:
        components, weights = gdpo_reward_components(config, non_tensor_batch, token_level_rewards.device)
    return adv.gdpo_outcome_advantage(components, response_mask, index, weights, epsilon, norm_adv_by_std_in_grpo)


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
    """RLOO leave-one-out baseline (``advantages.rloo_outcome_advantage``)."""
    return adv.rloo_outcome_advantage(token_level_rewards, response_mask, index)


@register_adv_est(AdvantageEstimator.RLOO_VECTORIZED)
def compute_rloo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: GroupIndex, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl 0.9's loop-free RLOO: as ``rloo``, except that a lone response gets advantage 0, not its score."""
    return adv.rloo_outcome_advantage(token_level_rewards, response_mask, index, lone_response_keeps_score=False)


@register_adv_est(AdvantageEstimator.OPO)
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: GroupIndex, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO length-weighted baseline (``advantages.opo_outcome_advantage``)."""
    return adv.opo_outcome_advantage(token_level_rewards, response_mask, index)


@register_adv_est(AdvantageEstimator.GPG)
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    f_norm: float = 1.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG rescaled group-centred score (``advantages.gpg_outcome_advantage``)."""
    return adv.gpg_outcome_advantage(token_level_rewards, response_mask, index, f_norm)


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE)
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: GroupIndex, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline (``advantages.reinforce_plus_plus_baseline_advantage``)."""
    return adv.reinforce_plus_plus_baseline_advantage(token_level_rewards, response_mask, index)


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with γ = ``config.gamma`` (``algorithm.gamma``)."""
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


@register_adv_est(AdvantageEstimator.OPTIMAL_TOKEN_BASELINE)
def compute_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = OTB_EPSILON,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal token baseline per response position (``token_baseline.optimal_token_baseline_advantage``)."""
    return optimal_token_baseline_advantage(
        token_level_rewards,
        response_mask,
        index,
        old_log_probs,
        sum_pi_squared,
        rollout_is_weights,
        handle_zero_tail,
        epsilon,
    )


@register_adv_est(AdvantageEstimator.TIR_OPTIMAL_TOKEN_BASELINE)
def compute_multi_turn_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = OTB_EPSILON,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal token baseline per generated-token rank, for multi-turn responses
    (``token_baseline.tir_optimal_token_baseline_advantage``)."""
    return tir_optimal_token_baseline_advantage(
        token_level_rewards,
        response_mask,
        index,
        old_log_probs,
        sum_pi_squared,
        rollout_is_weights,
        handle_zero_tail,
        epsilon,
    )


# ---------------------------------------------------------------------------
# Policy losses (pure math: hybridrl.algos.policy_losses): verl-signature adapters
# ---------------------------------------------------------------------------


def _verl_signature_loss(loss_mode: str, summary: str, default_agg: str = "token-mean") -> VerlPolicyLossFn:
    """The registered entry point of a built-in mode: verl 0.9's signature and ``(loss, metrics)`` return.

    It reads the actor config (``clip_ratio*``, ``tau_*``, ``policy_loss.*``, ``global_batch_info``) on every
    call and is marked built-in, so the actor binds the pure loss once instead of calling this.
    """

    def policy_loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = default_agg,
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        loss_fn = bind_policy_loss(loss_mode, policy_loss_params(config, loss_agg_mode))
        loss, metrics = loss_fn(old_log_prob, log_prob, advantages, response_mask,
                                rollout_is_weights=rollout_is_weights, global_batch=global_batch_info(config))
        return loss, {key: float(value) for key, value in metrics.items()}

    policy_loss.__name__ = policy_loss.__qualname__ = f"compute_policy_loss_{loss_mode}"
    policy_loss.__doc__ = f"{summary} Returns (pg_loss, metrics), verl 0.9's shape."
    return register_policy_loss(loss_mode)(mark_builtin_adapter(loss_mode)(policy_loss))


compute_policy_loss_vanilla = _verl_signature_loss("vanilla", "PPO clip + dual clip (``policy_losses.ppo_clip_loss``).")
compute_policy_loss_dppo_tv = _verl_signature_loss(
    "dppo_tv", "DPPO-Binary-TV (``divergence_losses.dppo_tv_loss``; clip_ratio_* are TV thresholds)."
)
compute_policy_loss_dppo_kl = _verl_signature_loss(
    "dppo_kl", "DPPO-Binary-KL (``divergence_losses.dppo_kl_loss``; clip_ratio_* are KL thresholds)."
)
compute_policy_loss_gspo = _verl_signature_loss(
    "gspo", "GSPO (``policy_losses.gspo_loss``; always seq-mean-token-mean, as verl).", "seq-mean-token-mean"
)
compute_policy_loss_sapo = _verl_signature_loss(
    "sapo", "SAPO soft gate with ``tau_pos`` / ``tau_neg`` (``divergence_losses.sapo_loss``).", "seq-mean-token-mean"
)
compute_policy_loss_gpg = _verl_signature_loss("gpg", "GPG, −A·log π (``policy_losses.gpg_loss``); no metrics.")
compute_policy_loss_clip_cov = _verl_signature_loss(
    "clip_cov", "Clip-Cov (``policy_losses.clip_cov_loss``) with ``policy_loss.clip_cov_{ratio,lb,ub}``."
)
compute_policy_loss_kl_cov = _verl_signature_loss(
    "kl_cov", "KL-Cov (``policy_losses.kl_cov_loss``) with ``policy_loss.kl_cov_ratio`` / ``ppo_kl_coef``."
)
compute_policy_loss_geo_mean = _verl_signature_loss(
    "geo_mean", "GMPO geometric-mean ratio (``policy_losses.geo_mean_loss``; ``loss_agg_mode`` unused, as verl)."
)
compute_policy_loss_dro = _verl_signature_loss(
    "dro", "Direct Reward Optimization with ``policy_loss.dro_beta`` (``divergence_losses.dro_loss``)."
)
compute_policy_loss_cispo = _verl_signature_loss(
    "cispo", "CISPO, sg(clip ρ)·(−A·log π) (``policy_losses.cispo_loss``)."
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
) -> VerlLossTuple:
    """The v0.4 API of the vanilla loss (explicit clip ranges, each defaulting to ``cliprange``)."""
    low = cliprange if cliprange_low is None else cliprange_low
    high = cliprange if cliprange_high is None else cliprange_high
    if low is None or high is None:
        raise ValueError("compute_policy_loss needs cliprange (or cliprange_low and cliprange_high).")
    tensors = (old_log_prob, log_prob, advantages, response_mask)
    return as_verl_tuple(*ppo_clip_loss(*tensors, low, high, clip_ratio_c, loss_agg_mode))


# ---------------------------------------------------------------------------
# Value, entropy, legacy reward and KL-controller entry points
# ---------------------------------------------------------------------------


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: int | None = None,
    global_batch_size: int | None = None,
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss (``value_loss.clipped_value_loss``), normalised as ``agg_loss`` is by the last four.

    Returns ``(vf_loss [], vf_clipfrac [])``.
    """
    global_batch = GlobalBatchInfo(dp_size, batch_num_tokens, global_batch_size, loss_scale_factor)
    vf_loss, metrics = clipped_value_loss(
        vpreds, returns, values, response_mask, cliprange_value, loss_agg_mode, global_batch
    )
    return vf_loss, metrics["critic/vf_clipfrac"]


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


def get_kl_controller(kl_ctrl: Any) -> FixedKLController | AdaptiveKLController:
    """Build the controller described by ``algorithm.kl_ctrl`` (``type``, ``kl_coef``, ``target_kl``, ``horizon``).

    Raises:
        ValueError: adaptive with ``horizon <= 0``.
        NotImplementedError: unknown ``type`` (as verl).
    """
    ctrl_type = config_value(kl_ctrl, "type")
    if ctrl_type == "fixed":
        return FixedKLController(kl_coef=config_value(kl_ctrl, "kl_coef"))
    if ctrl_type == "adaptive":
        horizon = config_value(kl_ctrl, "horizon")
        if not horizon > 0:
            raise ValueError(f"algorithm.kl_ctrl.horizon must be > 0 for an adaptive controller, got {horizon}.")
        return AdaptiveKLController(
            init_kl_coef=config_value(kl_ctrl, "kl_coef"),
            target_kl=config_value(kl_ctrl, "target_kl"),
            horizon=horizon,
        )
    raise NotImplementedError(f"algorithm.kl_ctrl.type must be 'fixed' or 'adaptive', got {ctrl_type!r}.")
