"""verl 0.9's rollout-correction helpers (``verl.trainer.ppo.rollout_corr_helper``), with verl's signatures, over
hybridrl's one implementation of the math.

The math lives in :mod:`hybridrl.algos.rollout_is` (IS weights, TIS / IcePop), :mod:`hybridrl.algos.rollout_rs`
(rejection sampling) and :mod:`hybridrl.algos.rollout_correction` (both, plus the off-policy diagnostics); the
settings are parsed by :mod:`hybridrl.algos.rollout_correction_config`. This module only translates verl's loose
arguments (threshold strings, option lists) into those parsed settings and the results into verl's return shapes
(a ``DataProto`` of weights, ``rollout_corr/``-prefixed metrics).

Deviation from verl: ``apply_bypass_mode`` does not rewrite ``policy_loss.loss_mode`` to ``bypass_mode``;
hybridrl's actor takes the bypass settings from the batch's ``meta_info["rollout_correction"]``, which it sets.
"""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.algos.rollout_correction import METRIC_PREFIX, compute_rollout_correction
from hybridrl.algos.rollout_correction import compute_offpolicy_metrics as _offpolicy_metrics
from hybridrl.algos.rollout_correction_config import (
    RS_OPTIONS,
    ISThreshold,
    RolloutCorrectionParams,
    parse_is_threshold,
    parse_rs_options,
    rollout_correction_params,
)
from hybridrl.algos.rollout_is import SAFETY_BOUND, compute_rollout_is_weights
from hybridrl.algos.rollout_is import compute_is_metrics as _is_metrics
from hybridrl.algos.rollout_rs import compute_rejection_mask
from hybridrl.protocol import DataProto

__all__ = [
    "SAFETY_BOUND",
    "SUPPORTED_ROLLOUT_RS_OPTIONS",
    "TOKEN_LEVEL_ROLLOUT_RS_OPTIONS",
    "apply_bypass_mode",
    "compute_is_metrics",
    "compute_offpolicy_metrics",
    "compute_rollout_corr_metrics_from_logprobs",
    "compute_rollout_correction_and_add_to_batch",
    "compute_rollout_correction_and_rejection_mask",
    "compute_rollout_correction_weights",
    "compute_rollout_rejection_mask",
]

SUPPORTED_ROLLOUT_RS_OPTIONS: set[str] = set(RS_OPTIONS)
TOKEN_LEVEL_ROLLOUT_RS_OPTIONS: set[str] = {name for name in RS_OPTIONS if name.startswith("token_")}
# the off-policy metrics that need no rollout log-probs
_TRAINING_ONLY_METRICS = ("training_ppl", "training_log_ppl")


def _prefixed(metrics: dict[str, Any]) -> dict[str, float]:
    return {METRIC_PREFIX + key: value.item() if torch.is_tensor(value) else value for key, value in metrics.items()}


def _check_not_bool(rollout_is_threshold: Any) -> None:
    """verl refuses a boolean threshold with a TypeError (``True`` would otherwise read as 1.0)."""
    if isinstance(rollout_is_threshold, bool):
        raise TypeError(
            f"rollout_is_threshold must be a float or a 'lower_upper' string, not a boolean: {rollout_is_threshold}"
        )


def compute_rollout_correction_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str = "token",
    rollout_is_threshold: str | float = 2.0,
    rollout_is_batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """IS weights ``[B, T]`` (detached, 0 on padding) and the ``rollout_is_*`` metrics (no prefix).

    Args:
        log_ratio: ``[B, T]`` log π_train − log π_rollout.
        response_mask: ``[B, T]``.
        rollout_is: ``token`` | ``sequence``.
        rollout_is_threshold: a float (TIS: w = min(ρ, t)) or ``"lower_upper"`` (IcePop: w = 0 outside).
        rollout_is_batch_normalize: divide the weights by their batch mean.
    """
    _check_not_bool(rollout_is_threshold)
    threshold = parse_is_threshold(rollout_is_threshold)
    return compute_rollout_is_weights(log_ratio, response_mask, rollout_is, threshold, rollout_is_batch_normalize)


def compute_rollout_rejection_mask(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_rs: str = "token_k1",
    rollout_rs_threshold: str | float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The response mask ``[B, T]`` with rejected tokens / sequences set to 0, and the ``rollout_rs_*`` metrics.

    ``rollout_rs`` is a comma-separated list of :data:`SUPPORTED_ROLLOUT_RS_OPTIONS`; ``rollout_rs_threshold`` one
    threshold for all or one per option (k1 options take ``"lower_upper"`` ratio bounds).
    """
    return compute_rejection_mask(log_ratio, response_mask, parse_rs_options(rollout_rs, rollout_rs_threshold))


def compute_is_metrics(
    rollout_is_weights: torch.Tensor,
    raw_rollout_is_weights: torch.Tensor,
    log_ratio_for_metrics: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str,
    rollout_is_threshold: float,
    rollout_is_threshold_lower: float | None = None,
) -> dict[str, float]:
    """verl's ``rollout_is_*`` metrics (no prefix) of applied and raw weights; a lower bound means IcePop."""
    threshold = ISThreshold(upper=float(rollout_is_threshold), lower=rollout_is_threshold_lower)
    return _is_metrics(
        rollout_is_weights, raw_rollout_is_weights, log_ratio_for_metrics, response_mask, rollout_is, threshold
    )


def compute_offpolicy_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor | None, response_mask: torch.Tensor
) -> dict[str, float]:
    """Off-policy diagnostics (no prefix): KL, k3 KL, perplexities, χ²; only ``training_*`` without rollout
    log-probs."""
    if not response_mask.any():
        raise ValueError("response_mask must contain at least one valid token")
    if rollout_log_prob is None:
        metrics = _offpolicy_metrics(old_log_prob, old_log_prob, response_mask)
        return {key: metrics[key] for key in _TRAINING_ONLY_METRICS}
    return _offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask)


def _params(
    rollout_is: str | None,
    rollout_is_threshold: str | float | None,
    rollout_is_batch_normalize: bool,
    rollout_rs: str | None,
    rollout_rs_threshold: str | float | None,
) -> RolloutCorrectionParams:
    _check_not_bool(rollout_is_threshold)
    if rollout_rs is not None and rollout_rs_threshold is None:
        raise ValueError("rollout_rs_threshold must be explicitly provided when rollout_rs is enabled")
    section = {
        "rollout_is": rollout_is if rollout_is_threshold is not None else None,
        "rollout_is_threshold": rollout_is_threshold,
        "rollout_is_batch_normalize": rollout_is_batch_normalize,
        "rollout_rs": rollout_rs,
        "rollout_rs_threshold": rollout_rs_threshold,
        "bypass_mode": False,
        "loss_type": "ppo_clip",
    }
    return rollout_correction_params(section)


def compute_rollout_correction_and_rejection_mask(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str | None = None,
    rollout_is_threshold: str | float | None = 2.0,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: str | float | None = None,
) -> tuple[DataProto | None, torch.Tensor, dict[str, float]]:
    """IS weights, rejection mask and off-policy metrics in one call.

    Returns:
        ``(weights, response_mask, metrics)``: a DataProto holding ``rollout_is_weights [B, T]`` (None when
        ``rollout_is`` is None), the mask with rejections applied ``[B, T]``, the ``rollout_corr/*`` metrics.
    """
    params = _params(rollout_is, rollout_is_threshold, rollout_is_batch_normalize, rollout_rs, rollout_rs_threshold)
    correction = compute_rollout_correction(old_log_prob, rollout_log_prob, response_mask, params)
    weights = None
    if correction.weights is not None:
        weights = DataProto.from_dict(tensors={"rollout_is_weights": correction.weights})
    mask = correction.response_mask
    return weights, mask.clone() if mask is response_mask else mask, correction.metrics


def compute_rollout_correction_and_add_to_batch(batch: DataProto, rollout_corr_config: Any) -> tuple[DataProto, dict]:
    """Decoupled mode on a batch holding ``old_log_probs``, ``rollout_log_probs`` and ``response_mask``: the mask
    is replaced by the rejection-reduced one, ``rollout_is_weights`` added when ``rollout_is`` is set.

    Args:
        rollout_corr_config: ``algorithm.rollout_correction`` (RolloutCorrectionConfig, DictConfig or dict).
    """
    params = rollout_correction_params(rollout_corr_config)
    correction = compute_rollout_correction(
        batch.batch["old_log_probs"], batch.batch["rollout_log_probs"], batch.batch["response_mask"], params
    )
    batch.batch["response_mask"] = correction.response_mask
    if correction.weights is not None:
        batch = batch.union(DataProto.from_dict(tensors={"rollout_is_weights": correction.weights}))
    return batch, correction.metrics


def compute_rollout_corr_metrics_from_logprobs(
    log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """The ``rollout_corr/*`` off-policy metrics of the current policy against the rollout's."""
    return _prefixed(compute_offpolicy_metrics(log_prob, rollout_log_prob, response_mask))


def apply_bypass_mode(batch: DataProto, rollout_corr_config: Any = None, policy_loss_config: Any = None) -> None:
    """Bypass mode: ``old_log_probs := rollout_log_probs`` (no old-log-prob forward), and the settings put where
    hybridrl's actor reads them (``batch.meta_info["rollout_correction"]``, bypass on). ``policy_loss_config`` is
    accepted for verl's signature and left as it is (see the module docstring).

    Raises:
        ValueError: the batch has no ``rollout_log_probs`` (set ``actor_rollout_ref.rollout.calculate_log_probs``).
    """
    if "rollout_log_probs" not in batch.batch.keys():
        raise ValueError(
            "bypass_mode=True requires rollout_log_probs in batch: set "
            "actor_rollout_ref.rollout.calculate_log_probs=True"
        )
    batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"]
    if rollout_corr_config is not None:
        params = rollout_correction_params(rollout_corr_config)
        batch.meta_info["rollout_correction"] = RolloutCorrectionParams(**{**params.__dict__, "bypass_mode": True})
