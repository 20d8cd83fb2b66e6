"""Registries of advantage estimators and policy losses, keyed by verl's config strings.

``core_algos`` re-exports everything here (users and tests reach for ``core_algos.ADV_ESTIMATOR_REGISTRY``
as in verl); this module exists so the policy-loss adapters can register themselves without an import
cycle. Also holds the small config readers the verl-signature adapters share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

import torch

__all__ = [
    "ADV_ESTIMATOR_REGISTRY",
    "POLICY_LOSS_REGISTRY",
    "AdvantageEstimator",
    "AdvantageFn",
    "PolicyLossFn",
    "clip_ratios_from_config",
    "config_value",
    "get_adv_estimator_fn",
    "get_policy_loss_fn",
    "register_adv_est",
    "register_policy_loss",
]

AdvantageFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
# fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config)
#   -> (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)      (verl v0.5.0's contract)
PolicyLossFn = Callable[..., tuple[torch.Tensor, ...]]


# ---------------------------------------------------------------------------
# Registries
# ---------------------------------------------------------------------------


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


ADV_ESTIMATOR_REGISTRY: dict[str, AdvantageFn] = {}
POLICY_LOSS_REGISTRY: dict[str, PolicyLossFn] = {}


def _name_of(name_or_enum: str | Enum) -> str:
    return str(name_or_enum.value) if isinstance(name_or_enum, Enum) else name_or_enum


def register_adv_est(name_or_enum: str | AdvantageEstimator) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator registering an advantage estimator under a name (or an ``AdvantageEstimator``).

    Raises:
        ValueError: if a different function is already registered under that name.
    """

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        name = _name_of(name_or_enum)
        if name in ADV_ESTIMATOR_REGISTRY and ADV_ESTIMATOR_REGISTRY[name] is not fn:
            raise ValueError(f"Adv estimator {name!r} is already registered: {ADV_ESTIMATOR_REGISTRY[name]} vs {fn}")
        ADV_ESTIMATOR_REGISTRY[name] = fn
        return fn

    return decorator


def get_adv_estimator_fn(name_or_enum: str | AdvantageEstimator) -> AdvantageFn:
    """Look up an estimator. Raises ValueError naming the valid estimators."""
    name = _name_of(name_or_enum)
    if name not in ADV_ESTIMATOR_REGISTRY:
        raise ValueError(
            f"Unknown advantage estimator: {name!r}. Valid estimators: {sorted(ADV_ESTIMATOR_REGISTRY)}. "
            "Set algorithm.adv_estimator to one of them, or register yours with @register_adv_est."
        )
    return ADV_ESTIMATOR_REGISTRY[name]


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator registering a policy loss under ``name`` (``policy_loss.loss_mode``)."""

    def decorator(fn: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSS_REGISTRY[name] = fn
        return fn

    return decorator


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """Look up a policy loss. Raises ValueError naming the valid loss modes."""
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(
            f"Unsupported loss mode: {name!r}. Supported modes are: {sorted(POLICY_LOSS_REGISTRY)} "
            "(actor_rollout_ref.actor.policy_loss.loss_mode)."
        )
    return POLICY_LOSS_REGISTRY[name]


# ---------------------------------------------------------------------------
# Config access for the adapters (OmegaConf DictConfig, dict, or dataclass)
# ---------------------------------------------------------------------------


def config_value(config: Any, key: str, default: Any = None) -> Any:
    """``config.key`` for a mapping or an object; ``default`` when absent or None."""
    if config is None:
        return default
    value = config.get(key, None) if isinstance(config, Mapping) else getattr(config, key, None)
    return default if value is None else value


def clip_ratios_from_config(config: Any, loss_mode: str) -> tuple[float, float]:
    """(ε_low, ε_high): ``clip_ratio_low/high``, each falling back to ``clip_ratio`` (verl)."""
    clip_ratio = config_value(config, "clip_ratio")
    low = config_value(config, "clip_ratio_low", clip_ratio)
    high = config_value(config, "clip_ratio_high", clip_ratio)
    if low is None or high is None:
        raise ValueError(
            f"policy loss {loss_mode!r} needs actor_rollout_ref.actor.clip_ratio "
            "(or clip_ratio_low and clip_ratio_high); pass the actor config as `config`."
        )
    return float(low), float(high)
