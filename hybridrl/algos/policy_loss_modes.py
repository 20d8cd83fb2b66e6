"""``policy_loss.loss_mode`` → the loss the actor calls, bound to its hyper-parameters once.

Two kinds of policy loss reach the actor, and both come out as one callable::

    loss_fn(old_log_prob [B, T], log_prob [B, T], advantages [B, T], response_mask [B, T],
            rollout_is_weights=None | [B, T], global_batch=GlobalBatchInfo(...))
        -> (loss [], metrics {"actor/pg_clipfrac": [], "actor/ppo_kl": [], ...})

``global_batch`` (``aggregation.GlobalBatchInfo``) carries the mini-batch's normalisers, which change per
mini-batch, so they are passed per call; ``rollout_is_weights`` (rollout correction, decoupled mode) is passed
only when the batch carries them. Bypass mode replaces the loss: :func:`bind_bypass_loss`.

* a built-in mode (``vanilla``, ``gspo``, ``gpg``, ``clip_cov``, ``kl_cov``, ``geo_mean``, ``cispo``, ``sapo``,
  ``dppo_tv``, ``dppo_kl``, ``dro``): :func:`bind_policy_loss` returns the pure function of ``policy_losses`` /
  ``divergence_losses`` with its hyper-parameters bound (a ``functools.partial``);
* a user loss registered with verl's ``core_algos.register_policy_loss`` (verl's signature
  ``fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config[, rollout_is_weights])``):
  :func:`call_verl_style_loss` calls it and accepts both return shapes —

  - verl 0.9's ``(loss, metrics)``: the loss is taken to normalise by ``config.global_batch_info``, which is set
    before each call as verl 0.9's actor does, so it is used as it is;
  - verl 0.5's 4-tuple ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``: such a loss normalises by its own
    micro-batch, so it is weighted by the micro-batch's share of the mini-batch (verl 0.5's gradient
    accumulation weight) and its metrics get verl's names.

``POLICY_LOSS_REGISTRY`` holds verl-signature functions by mode: it is the very dict that
``hybridrl.trainer.ppo.core_algos`` publishes as its module global of the same name, so a loss a user
registers there is seen here without this package importing the trainer. The built-in entries are
core_algos' adapters, marked with :func:`mark_builtin_adapter`; :func:`resolve_policy_loss` calls
the pure function for them and the user's function for anything else (including a user override of
a built-in name). A registry rebound on ``core_algos`` (``core_algos.POLICY_LOSS_REGISTRY = {...}``)
is seen by core_algos' getters, not by an actor built afterwards.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from hybridrl.algos.aggregation import LOCAL_BATCH, GlobalBatchInfo
from hybridrl.algos.divergence_losses import dppo_kl_loss, dppo_tv_loss, dro_loss, sapo_loss
from hybridrl.algos.params import PolicyLossParams, config_value, policy_loss_params
from hybridrl.algos.policy_losses import (
    Metrics,
    cispo_loss,
    clip_cov_loss,
    geo_mean_loss,
    gpg_loss,
    gspo_loss,
    kl_cov_loss,
    ppo_clip_loss,
)
from hybridrl.algos.rollout_correction import RolloutCorrectionParams, bypass_policy_loss

__all__ = [
    "BUILTIN_LOSS_MODES",
    "POLICY_LOSS_REGISTRY",
    "BoundPolicyLoss",
    "ConfigWithBatchInfo",
    "VerlLossTuple",
    "VerlPolicyLossFn",
    "as_verl_tuple",
    "bind_bypass_loss",
    "bind_policy_loss",
    "call_verl_style_loss",
    "mark_builtin_adapter",
    "resolve_policy_loss",
]

# fn(old_log_prob, log_prob, advantages, response_mask, *, rollout_is_weights=None) -> (loss, metrics)
BoundPolicyLoss = Callable[..., tuple[torch.Tensor, Metrics]]
# fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config)
#   -> (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)      (verl v0.5.0's contract)
VerlPolicyLossFn = Callable[..., Any]
VerlLossTuple = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
_F = TypeVar("_F", bound=Callable[..., Any])

POLICY_LOSS_REGISTRY: dict[str, VerlPolicyLossFn] = {}

_CLIP = ("clip_ratio_low", "clip_ratio_high")
_AGG = ("loss_agg_mode",)  # loss_scale_factor travels per call, in global_batch
# loss_mode → (pure loss, the PolicyLossParams fields it takes). geo_mean, gspo and sapo aggregate their own way.
_MODES: dict[str, tuple[Callable[..., tuple[torch.Tensor, Metrics]], tuple[str, ...]]] = {
    "vanilla": (ppo_clip_loss, (*_CLIP, "clip_ratio_c", *_AGG)),
    "gspo": (gspo_loss, _CLIP),
    "gpg": (gpg_loss, _AGG),
    "clip_cov": (clip_cov_loss, (*_CLIP, "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", *_AGG)),
    "kl_cov": (kl_cov_loss, ("kl_cov_ratio", "ppo_kl_coef", *_AGG)),
    "geo_mean": (geo_mean_loss, _CLIP),
    "cispo": (cispo_loss, (*_CLIP, *_AGG)),
    "sapo": (sapo_loss, ("tau_pos", "tau_neg")),
    "dppo_tv": (dppo_tv_loss, (*_CLIP, "clip_ratio_c", *_AGG)),
    "dppo_kl": (dppo_kl_loss, (*_CLIP, "clip_ratio_c", *_AGG)),
    "dro": (dro_loss, ("dro_beta", *_AGG)),
}
# geo_mean ignores the global normalisers (a plain mean, as verl 0.9); it takes no global_batch argument
_LOCAL_ONLY_MODES = frozenset({"geo_mean"})
BUILTIN_LOSS_MODES: tuple[str, ...] = tuple(_MODES)
_BUILTIN_ATTRIBUTE = "builtin_loss_mode"


def bind_policy_loss(loss_mode: str, params: PolicyLossParams) -> BoundPolicyLoss:
    """The pure loss of a built-in ``loss_mode`` with ``params`` bound; None fields keep the function's default.

    Raises:
        ValueError: an unknown mode (names the valid ones), or a clipping loss without clip ratios.
    """
    if loss_mode not in _MODES:
        raise ValueError(
            f"Unsupported loss mode: {loss_mode}. Supported modes are: {sorted({*_MODES, *POLICY_LOSS_REGISTRY})} "
            "(actor_rollout_ref.actor.policy_loss.loss_mode)."
        )
    loss_fn, fields = _MODES[loss_mode]
    if _CLIP[0] in fields and (params.clip_ratio_low is None or params.clip_ratio_high is None):
        raise ValueError(
            f"policy loss {loss_mode!r} needs actor_rollout_ref.actor.clip_ratio "
            "(or clip_ratio_low and clip_ratio_high); pass the actor config as `config`."
        )
    hyper = {field: getattr(params, field) for field in fields if getattr(params, field) is not None}
    bound = functools.partial(loss_fn, **hyper)
    return _ignoring_global_batch(bound) if loss_mode in _LOCAL_ONLY_MODES else bound


def _ignoring_global_batch(loss_fn: BoundPolicyLoss) -> BoundPolicyLoss:
    """``loss_fn`` accepting (and ignoring) ``global_batch``, so every bound loss takes the same arguments."""

    def call(*args: Any, global_batch: GlobalBatchInfo = LOCAL_BATCH, **kwargs: Any) -> tuple[torch.Tensor, Metrics]:
        return loss_fn(*args, **kwargs)

    return call


def bind_bypass_loss(correction: RolloutCorrectionParams, params: PolicyLossParams) -> BoundPolicyLoss:
    """Bypass mode's loss (``algorithm.rollout_correction.bypass_mode``): PPO clip or REINFORCE by
    ``correction.loss_type``, with the correction computed per call; replaces ``policy_loss.loss_mode`` (verl).

    Raises:
        ValueError: ``loss_type=ppo_clip`` without clip ratios.
    """
    if correction.loss_type == "ppo_clip" and (params.clip_ratio_low is None or params.clip_ratio_high is None):
        raise ValueError("bypass_mode with loss_type=ppo_clip needs actor_rollout_ref.actor.clip_ratio.")
    hyper = {
        field: getattr(params, field) for field in (*_CLIP, "clip_ratio_c", *_AGG) if getattr(params, field) is not None
    }
    hyper.setdefault("clip_ratio_low", 0.0)  # unused by reinforce; keeps one signature
    hyper.setdefault("clip_ratio_high", 0.0)
    return functools.partial(bypass_policy_loss, params=correction, **hyper)


def as_verl_tuple(loss: torch.Tensor, metrics: Metrics) -> VerlLossTuple:
    """``(loss, metrics)`` → verl 0.5's ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``."""
    return loss, metrics["actor/pg_clipfrac"], metrics["actor/ppo_kl"], metrics["actor/pg_clipfrac_lower"]


class ConfigWithBatchInfo:
    """The actor section as a user loss sees it: every key of ``config``, plus verl 0.9's ``global_batch_info``.

    verl 0.9's losses aggregate with ``agg_loss(..., **config.global_batch_info)``; the actor sets that dict
    before each call. The section itself (an OmegaConf node in struct mode, a dict, a dataclass) stays untouched.
    """

    def __init__(self, config: Any) -> None:
        self._config = config
        self.global_batch_info: dict[str, Any] = LOCAL_BATCH.as_kwargs()

    def __getattr__(self, key: str) -> Any:
        return getattr(self._config, key) if not isinstance(self._config, dict) else self._config[key]

    def __getitem__(self, key: str) -> Any:
        return self.global_batch_info if key == "global_batch_info" else self._config[key]

    def __contains__(self, key: str) -> bool:
        return key == "global_batch_info" or key in self._config

    def get(self, key: str, default: Any = None) -> Any:
        return self.global_batch_info if key == "global_batch_info" else config_value(self._config, key, default)


def _micro_batch_share(rows: int, global_batch: GlobalBatchInfo) -> float:
    """B_micro / B_mini_per_rank = B_micro · D / G: verl 0.5's gradient-accumulation weight (1 without G)."""
    if global_batch.global_batch_size is None:
        return 1.0
    return rows * global_batch.dp_size / float(global_batch.global_batch_size)


def call_verl_style_loss(
    loss_fn: VerlPolicyLossFn,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    config: Any,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
) -> tuple[torch.Tensor, Metrics]:
    """Call a verl-signature loss and return ``(loss, metrics)`` (both return shapes: see the module docstring).

    ``config`` is given to the loss as a :class:`ConfigWithBatchInfo` whose ``global_batch_info`` is
    ``global_batch``. A verl 0.9 ``(loss, metrics)`` result is returned as it is (metrics detached); a verl 0.5
    4-tuple's loss is multiplied by the micro-batch's share of the mini-batch (B_micro · D / G), which turns its
    own-micro-batch mean into the partial sum the actor accumulates.

    Raises:
        ValueError: ``rollout_is_weights`` given to a loss whose signature does not take them.
    """
    extra = {}
    if rollout_is_weights is not None:
        if "rollout_is_weights" not in inspect.signature(loss_fn).parameters:
            raise ValueError(
                f"policy loss {getattr(loss_fn, '__name__', loss_fn)!r} takes no rollout_is_weights, but "
                "algorithm.rollout_correction.rollout_is is set: add a `rollout_is_weights=None` parameter "
                "(verl 0.9's signature) or set algorithm.rollout_correction.rollout_is=null."
            )
        extra["rollout_is_weights"] = rollout_is_weights
    view = config if isinstance(config, ConfigWithBatchInfo) else ConfigWithBatchInfo(config)
    view.global_batch_info = global_batch.as_kwargs()
    result = loss_fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, view, **extra)
    if len(result) == 2 and isinstance(result[1], dict):
        loss, raw = result
        return loss, {key: torch.as_tensor(value).detach() for key, value in raw.items()}
    loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower = result
    return loss * _micro_batch_share(int(advantages.shape[0]), global_batch), {
        "actor/pg_clipfrac": torch.as_tensor(pg_clipfrac).detach(),
        "actor/ppo_kl": torch.as_tensor(ppo_kl).detach(),
        "actor/pg_clipfrac_lower": torch.as_tensor(pg_clipfrac_lower).detach(),
    }


def mark_builtin_adapter(loss_mode: str) -> Callable[[_F], _F]:
    """Mark a verl-signature adapter as the registry face of the built-in ``loss_mode`` (see the module docstring)."""

    def mark(fn: _F) -> _F:
        setattr(fn, _BUILTIN_ATTRIBUTE, loss_mode)
        return fn

    return mark


def resolve_policy_loss(loss_mode: str, config: Any, loss_agg_mode: str) -> BoundPolicyLoss:
    """The actor's policy loss, resolved once: the bound pure loss, or a user's verl-style loss.

    Args:
        loss_mode: ``policy_loss.loss_mode``.
        config: the actor section; read here once for a built-in mode, handed to a user loss on every call.
        loss_agg_mode: ``actor.loss_agg_mode``.
    """
    registered = POLICY_LOSS_REGISTRY.get(loss_mode)
    if registered is None or getattr(registered, _BUILTIN_ATTRIBUTE, None) == loss_mode:
        return bind_policy_loss(loss_mode, policy_loss_params(config, loss_agg_mode))
    return functools.partial(
        call_verl_style_loss, registered, loss_agg_mode=loss_agg_mode, config=ConfigWithBatchInfo(config)
    )
