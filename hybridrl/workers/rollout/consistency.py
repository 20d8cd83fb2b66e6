"""Rollout ↔ trainer consistency: do the rollout's token probabilities match the trainer's?

verl 0.5 logs, when the rollout returns ``rollout_log_probs``::

    diff = | exp(rollout_log_probs) - exp(old_log_probs) |   over valid response tokens
    training/rollout_probs_diff_max, training/rollout_probs_diff_mean, training/rollout_probs_diff_std

hybridrl adds ``check_rollout_probs_diff``: a difference beyond a bound is an error with a
diagnosis instead of a silent degradation (stale weights, dtype or sampling mismatches, templates).
Both sides must be taken at the same temperature (see ``generation/sampling.py`` for the definition).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


class RolloutConsistencyError(RuntimeError):
    """The rollout's token probabilities disagree with the trainer's beyond the configured bound."""


def compute_rollout_probs_diff_metrics(
    rollout_log_probs: torch.Tensor, old_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """Max / mean / std of ``|p_rollout - p_trainer|`` over valid response tokens.

    Args:
        rollout_log_probs: ``[B, R]`` log-probs of the sampled tokens from the rollout engine.
        old_log_probs: ``[B, R]`` the trainer's log-probs of the same tokens (``compute_log_prob``).
        response_mask: ``[B, R]`` 1 on valid response tokens.

    Returns:
        ``training/rollout_probs_diff_{max,mean,std}`` (std is unbiased, as ``torch.std``; 0 for a single
        token); all 0 when the mask is empty.
    """
    if rollout_log_probs.shape != old_log_probs.shape or old_log_probs.shape != response_mask.shape:
        raise ValueError(
            f"shape mismatch: rollout_log_probs {list(rollout_log_probs.shape)}, old_log_probs "
            f"{list(old_log_probs.shape)}, response_mask {list(response_mask.shape)}"
        )
    diff = (rollout_log_probs.float().exp() - old_log_probs.float().exp()).abs()
    valid = torch.masked_select(diff, response_mask.bool())
    if valid.numel() == 0:
        values = (0.0, 0.0, 0.0)
    else:
        std = valid.std().item() if valid.numel() > 1 else 0.0
        values = (valid.max().item(), valid.mean().item(), std)
    keys = ("training/rollout_probs_diff_max", "training/rollout_probs_diff_mean", "training/rollout_probs_diff_std")
    return dict(zip(keys, values))


def check_rollout_probs_diff(
    metrics: Mapping[str, float], bound: float | None, context: Mapping[str, Any] | None = None
) -> None:
    """Raise ``RolloutConsistencyError`` when ``training/rollout_probs_diff_max`` exceeds ``bound``.

    Args:
        metrics: the output of ``compute_rollout_probs_diff_metrics``.
        bound: the largest allowed probability difference; ``None`` or ``<= 0`` disables the check.
        context: facts to print with the diagnosis, e.g. ``{"rollout.dtype": "bfloat16",
            "actor dtype": "float32", "rollout temperature": 1.0, "log_prob temperature": 1.0}``.
    """
    if bound is None or bound <= 0:
        return
    worst = metrics["training/rollout_probs_diff_max"]
    if worst <= bound:
        return
    facts = ", ".join(f"{k}={v}" for k, v in (context or {}).items())
    raise RolloutConsistencyError(
        f"the rollout's token probabilities differ from the trainer's: max |p_rollout - p_trainer| = {worst:.4g} "
        f"> bound {bound:g} (mean {metrics['training/rollout_probs_diff_mean']:.4g}, std "
        f"{metrics['training/rollout_probs_diff_std']:.4g}). {facts + '. ' if facts else ''}"
        "Check, in this order: (1) stale rollout weights: the weight sync must run after every actor update "
        "(the sync verification would name the tensors); (2) dtype: actor_rollout_ref.rollout.dtype vs the actor's "
        "compute dtype (actor.fsdp_config.mixed_precision / model dtype): bf16 vs fp32 alone gives differences "
        "of a few 1e-2; (3) sampling parameters: compute_log_prob must use the rollout temperature "
        "(meta_info['temperature'] = rollout.temperature); (4) template / tokenization: the trainer must score "
        "exactly the token ids the rollout generated (no decode → re-tokenize round trip)."
    )
