"""The config boundary of the math: typed hyper-parameter records, read once from a config section.

The pure functions of ``hybridrl.algos`` never see a config object; whoever holds one (the actor at
construction, the verl-signature adapters of ``core_algos`` per call) turns it into the frozen record
here and passes plain values on. The section may be an OmegaConf ``DictConfig``, a ``dict`` or any
object with attributes (verl's dataclass configs).

A key that is absent or null reads as ``None``, and ``None`` means "the pure function's own default"
(verl's null fallback: e.g. ``clip_ratio_c`` 3.0, ``policy_loss.ppo_kl_coef`` 1.0); the shipped
YAML sets every key, so a composed config never falls back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the config checks read this module's parsers before anything imports torch
    from hybridrl.algos.aggregation import GlobalBatchInfo

__all__ = ["PolicyLossParams", "config_value", "global_batch_info", "policy_loss_params"]


def config_value(config: Any, key: str, default: Any = None) -> Any:
    """``config.key`` for a mapping or an object; ``default`` when the config, the key or the value is None."""
    if config is None:
        return default
    value = config.get(key, None) if isinstance(config, Mapping) else getattr(config, key, None)
    return default if value is None else value


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class PolicyLossParams:
    """Hyper-parameters of the built-in policy losses (``actor_rollout_ref.actor``); None = the function's default."""

    loss_agg_mode: str  # token-mean | token-sum | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm
    clip_ratio_low: float | None  # ε_low: ρ ≥ 1 − ε_low (falls back to clip_ratio)
    clip_ratio_high: float | None  # ε_high: ρ ≤ 1 + ε_high (falls back to clip_ratio)
    clip_ratio_c: float | None  # dual-clip bound c > 1 (DPPO: the truncation of its importance weight)
    loss_scale_factor: float | None  # constant divisor of seq-mean-token-sum-norm (None: T); per-call, not bound
    clip_cov_ratio: float | None  # Clip-Cov: share of tokens detached
    clip_cov_lb: float | None  # Clip-Cov: covariance window, lower bound
    clip_cov_ub: float | None  # Clip-Cov: covariance window, upper bound
    kl_cov_ratio: float | None  # KL-Cov: share of tokens penalised
    ppo_kl_coef: float | None  # KL-Cov: coefficient of the |log ρ| penalty
    tau_pos: float | None = None  # SAPO: gate temperature of tokens with A > 0
    tau_neg: float | None = None  # SAPO: gate temperature of tokens with A ≤ 0
    dro_beta: float | None = None  # DRO: coefficient β of the ½ β (log ρ)² penalty


def policy_loss_params(config: Any, loss_agg_mode: str) -> PolicyLossParams:
    """Read the actor section once into a :class:`PolicyLossParams`.

    ``clip_ratio_low`` / ``clip_ratio_high`` fall back to ``clip_ratio`` when null (verl); the
    ``policy_loss.*`` keys are read from the ``policy_loss`` sub-section.
    """
    clip_ratio = config_value(config, "clip_ratio")
    policy_loss = config_value(config, "policy_loss")
    return PolicyLossParams(
        loss_agg_mode=loss_agg_mode,
        clip_ratio_low=_float_or_none(config_value(config, "clip_ratio_low", clip_ratio)),
        clip_ratio_high=_float_or_none(config_value(config, "clip_ratio_high", clip_ratio)),
        clip_ratio_c=_float_or_none(config_value(config, "clip_ratio_c")),
        loss_scale_factor=_float_or_none(config_value(config, "loss_scale_factor")),
        clip_cov_ratio=_float_or_none(config_value(policy_loss, "clip_cov_ratio")),
        clip_cov_lb=_float_or_none(config_value(policy_loss, "clip_cov_lb")),
        clip_cov_ub=_float_or_none(config_value(policy_loss, "clip_cov_ub")),
        kl_cov_ratio=_float_or_none(config_value(policy_loss, "kl_cov_ratio")),
        ppo_kl_coef=_float_or_none(config_value(policy_loss, "ppo_kl_coef")),
        tau_pos=_float_or_none(config_value(config, "tau_pos")),
        tau_neg=_float_or_none(config_value(config, "tau_neg")),
        dro_beta=_float_or_none(config_value(policy_loss, "dro_beta")),
    )


def global_batch_info(config: Any) -> GlobalBatchInfo:
    """``config.global_batch_info`` (verl 0.9's dict: dp_size, batch_num_tokens, global_batch_size,
    loss_scale_factor) as a record; absent or empty: normalise by the micro-batch alone, as verl 0.9 does."""
    from hybridrl.algos.aggregation import GlobalBatchInfo

    info = config_value(config, "global_batch_info") or {}
    return GlobalBatchInfo(**{key: info[key] for key in GlobalBatchInfo.__dataclass_fields__ if key in info})
