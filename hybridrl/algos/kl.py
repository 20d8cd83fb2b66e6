"""KL estimators between the policy and the reference policy, and the KL-coefficient controllers.

Notation:
    log π, log π_ref: ``[B, T]`` per-token log-probs of the sampled tokens under the policy and the
    reference; δ = log π − log π_ref.

Estimators (Schulman, "Approximating KL divergence", http://joschu.net/blog/kl-approx.html):
    kl / k1:         δ
    abs:             |δ|
    mse / k2:        ½ δ²
    low_var_kl / k3: e^{−δ} + δ − 1   (δ clamped to ±20 first, the result to [−10, 10], as verl)
    full:            not implemented (needs full-vocabulary distributions), as in verl
    <name>+:         straight-through: the value of <name>, the gradient of k2 (which is the unbiased
                     gradient of KL); added after v0.5.0, follows verl's latest code.

Controllers (Ziegler et al. 2019, arXiv 1909.08593): the in-reward KL coefficient β is either fixed
or adapted towards a target KL with a proportional controller. ``get_kl_controller`` (which reads
``algorithm.kl_ctrl``) is in ``hybridrl.trainer.ppo.core_algos``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import torch

__all__ = [
    "KL_PENALTY_TYPES",
    "AdaptiveKLController",
    "FixedKLController",
    "KLController",
    "kl_penalty",
    "kl_penalty_forward",
]

# k3's log-ratio is clamped before exp: e^20 ≈ 4.9e8 is finite in fp32/bf16, e^{δ} beyond ~88 is not.
_K3_LOG_RATIO_CLAMP = 20.0
# k3 itself is clamped to [−10, 10] (verl): one token far off-policy cannot dominate the KL term.
_K3_VALUE_CLAMP = 10.0
# Ziegler et al.'s proportional error is clipped to ±0.2 so one noisy batch moves β by a bounded step.
_ADAPTIVE_KL_MAX_ERROR = 0.2
_STRAIGHT_THROUGH_SUFFIX = "+"


def _k1(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    # k1 = log π − log π_ref
    return log_prob - ref_log_prob


def _abs(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return (log_prob - ref_log_prob).abs()


def _k2(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    # k2 = ½ (log π − log π_ref)²
    return 0.5 * (log_prob - ref_log_prob).square()


def _k3(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    # k3 = r − log r − 1 with log r = log π_ref − log π  (unbiased, always ≥ 0)
    log_ratio = torch.clamp(ref_log_prob - log_prob, min=-_K3_LOG_RATIO_CLAMP, max=_K3_LOG_RATIO_CLAMP)
    k3 = (torch.exp(log_ratio) - log_ratio - 1).contiguous()
    return torch.clamp(k3, min=-_K3_VALUE_CLAMP, max=_K3_VALUE_CLAMP)


_KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "kl": _k1,
    "k1": _k1,
    "abs": _abs,
    "mse": _k2,
    "k2": _k2,
    "low_var_kl": _k3,
    "k3": _k3,
}
KL_PENALTY_TYPES: tuple[str, ...] = (
    *_KL_ESTIMATORS,
    *(name + _STRAIGHT_THROUGH_SUFFIX for name in _KL_ESTIMATORS),
)


def kl_penalty_forward(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """The plain KL estimator ``kl_penalty`` (no ``+`` suffix): ``[B, T]``, ``[B, T]`` → ``[B, T]``.

    Raises:
        NotImplementedError: for ``full`` (as verl) and for unknown names (the message lists the valid ones).
    """
    if kl_penalty == "full":
        raise NotImplementedError(
            "kl_penalty='full' needs full-vocabulary log-probs and is not implemented (as in verl); "
            f"use one of {list(KL_PENALTY_TYPES)}."
        )
    estimator = _KL_ESTIMATORS.get(kl_penalty)
    if estimator is None:
        raise NotImplementedError(
            f"Unknown kl_penalty type {kl_penalty!r}. Valid types: {list(KL_PENALTY_TYPES)} "
            "(algorithm.kl_penalty / actor_rollout_ref.actor.kl_loss_type)."
        )
    return estimator(log_prob, ref_log_prob)


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate between policy and reference.

    Args:
        log_prob: ``[B, T]`` log π. ref_log_prob: ``[B, T]`` log π_ref.
        kl_penalty: estimator name (see the module docstring); a trailing ``+`` selects the
            straight-through variant.

    Returns:
        ``[B, T]`` the estimate (no masking applied).
    """
    straight_through = kl_penalty.endswith(_STRAIGHT_THROUGH_SUFFIX)
    base = kl_penalty[: -len(_STRAIGHT_THROUGH_SUFFIX)] if straight_through else kl_penalty
    forward_value = kl_penalty_forward(log_prob, ref_log_prob, base)
    if not straight_through:
        return forward_value
    # value of the chosen estimator, gradient of k2: k2 − sg(k2) + sg(k)
    backward_value = _k2(log_prob, ref_log_prob)
    return backward_value - backward_value.detach() + forward_value.detach()


# ---------------------------------------------------------------------------
# KL-coefficient controllers
# ---------------------------------------------------------------------------


class KLController(Protocol):
    """What the driver needs from a KL controller: the coefficient and its update rule."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> None: ...


class FixedKLController:
    """β stays at ``kl_coef``."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op: a fixed coefficient ignores the measured KL."""

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Ziegler et al.'s proportional controller.

    e = clip(KL_current / KL_target − 1, −0.2, 0.2);  β ← β · (1 + e · n_steps / horizon)
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float) -> None:
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = current_kl / self.target - 1
        proportional_error = min(max(proportional_error, -_ADAPTIVE_KL_MAX_ERROR), _ADAPTIVE_KL_MAX_ERROR)
        self.value *= 1 + proportional_error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.value = float(state["value"])
