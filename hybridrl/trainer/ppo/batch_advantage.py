"""Batch-level reward shaping and advantages the driver runs between worker calls (verl 0.5's ``ray_trainer`` functions).

``ray_trainer`` re-exports them, so ``from hybridrl.trainer.ppo.ray_trainer import compute_advantage``
works as in verl 0.5. They read and write batch keys; the math is in ``core_algos``.

Batch keys (B responses, R max response length):
    reads  ``responses`` [B, R], ``attention_mask`` [B, P+R], ``token_level_scores`` / ``token_level_rewards`` [B, R],
           ``old_log_probs``, ``ref_log_prob``, ``values`` [B, R], ``reward_baselines`` [B], ``non_tensor_batch["uid"]``;
           by estimator: ``sum_pi_squared``, ``rollout_is_weights`` [B, R] (optimal token baseline),
           ``non_tensor_batch[key]`` [B] for each of ``algorithm.gdpo_reward_keys`` (gdpo)
    writes ``response_mask``, ``token_level_rewards``, ``advantages``, ``returns`` [B, R]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from tensordict import TensorDict

from hybridrl.algos.kl import KLController
from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo import core_algos
from hybridrl.trainer.ppo.core_algos import AdvantageEstimator
from hybridrl.utils.config_defaults import is_filled, section_with_defaults
from hybridrl.utils.torch_functional import masked_mean

__all__ = [
    "apply_kl_penalty",
    "compute_advantage",
    "compute_pf_ppo_reweight_data",
    "compute_response_mask",
    "gdpo_reward_metrics",
]

# PF-PPO resampling weights are floored at this so a zero-weight row keeps a tiny probability (verl).
_PF_PPO_MIN_WEIGHT = 1e-8


def _tensors(data: DataProto) -> TensorDict:
    if data.batch is None:
        raise ValueError("The driver helpers need a DataProto with tensors (data.batch is None).")
    return data.batch


def compute_response_mask(data: DataProto) -> torch.Tensor:
    """The response part of ``attention_mask``: ``[B, P+R]`` → ``[B, R]``."""
    batch = _tensors(data)
    response_length = batch["responses"].size(1)
    mask: torch.Tensor = batch["attention_mask"][:, -response_length:]
    return mask


def apply_kl_penalty(
    data: DataProto, kl_ctrl: KLController, kl_penalty: str = "kl"
) -> tuple[DataProto, dict[str, Any]]:
    """In-reward KL (classic PPO-RLHF): ``token_level_rewards = token_level_scores − β · KL·m``.

    KL_{i,t} = kl_penalty(log π_old, log π_ref)·m;  current_kl = mean_i(masked_mean_t(KL_i));
    then ``kl_ctrl.update(current_kl, n_steps=B)`` (β used for the rewards is the value before the update).

    Returns:
        the same DataProto with ``token_level_rewards`` set, and
        ``{"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": β}``.
    """
    batch = _tensors(data)
    response_mask = batch["response_mask"]
    kld = core_algos.kl_penalty(batch["old_log_probs"], batch["ref_log_prob"], kl_penalty) * response_mask
    beta = kl_ctrl.value
    batch["token_level_rewards"] = batch["token_level_scores"] - beta * kld
    current_kl = torch.mean(masked_mean(kld, mask=response_mask, axis=-1), dim=0).item()
    kl_ctrl.update(current_kl=current_kl, n_steps=batch.batch_size[0])
    return data, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}


def compute_advantage(
    data: DataProto,
    adv_estimator: AdvantageEstimator | str,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: DictConfig | None = None,
) -> DataProto:
    """Write ``advantages`` and ``returns`` (both ``[B, R]``) with the chosen estimator.

    GAE and GRPO are called with their explicit arguments (γ, λ / ``norm_adv_by_std_in_grpo``); every
    other estimator goes through the registry with :func:`_registry_kwargs` (verl 0.9's inputs).
    ``grpo_vectorized`` is GRPO under another name and honours ``norm_adv_by_std_in_grpo`` as ``grpo``
    does (verl 0.9 passes it only the config, which its vectorised GRPO does not read, so Dr.GRPO there
    silently divides by σ). ``num_repeat`` is accepted for verl compatibility and unused, as in verl.
    """
    batch = _tensors(data)
    if "response_mask" not in batch.keys():
        batch["response_mask"] = compute_response_mask(data)
    rewards, mask = batch["token_level_rewards"], batch["response_mask"]
    if adv_estimator == AdvantageEstimator.GAE:
        advantages, returns = core_algos.compute_gae_advantage_return(rewards, batch["values"], mask, gamma, lam)
    elif adv_estimator in (AdvantageEstimator.GRPO, AdvantageEstimator.GRPO_VECTORIZED):
        advantages, returns = core_algos.compute_grpo_outcome_advantage(
            rewards, mask, data.non_tensor_batch["uid"], norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo
        )
    else:
        kwargs = _registry_kwargs(data, adv_estimator, config)
        advantages, returns = core_algos.get_adv_estimator_fn(adv_estimator)(**kwargs)
    batch["advantages"] = advantages
    batch["returns"] = returns
    if adv_estimator == AdvantageEstimator.GAE and config is not None:
        # the trainer's section is filled; verl's config is optional and may be partial (filled here)
        algorithm = config if is_filled(config, "algorithm") else section_with_defaults(config, "algorithm")
        if algorithm.use_pf_ppo:
            data = compute_pf_ppo_reweight_data(data, algorithm.pf_ppo.reweight_method, algorithm.pf_ppo.weight_pow)
    return data


_TOKEN_BASELINE_ESTIMATORS = (AdvantageEstimator.OPTIMAL_TOKEN_BASELINE, AdvantageEstimator.TIR_OPTIMAL_TOKEN_BASELINE)


def _registry_kwargs(data: DataProto, adv_estimator: AdvantageEstimator | str, config: Any) -> dict[str, Any]:
    """The keyword arguments verl 0.9's ``compute_advantage`` gives a registered estimator.

    Always ``token_level_rewards``, ``response_mask``, ``config`` (the ``algorithm`` section); ``index`` (uid) and
    ``reward_baselines`` when present; for ``gdpo`` the batch itself (``non_tensor_batch``, ``batch``: its reward
    components are columns of the batch); for the optimal-token-baseline family ``sum_pi_squared``,
    ``old_log_probs`` and ``rollout_is_weights`` (None without rollout correction).
    """
    batch = _tensors(data)
    kwargs: dict[str, Any] = {
        "token_level_rewards": batch["token_level_rewards"],
        "response_mask": batch["response_mask"],
        "config": config,
    }
    if "uid" in data.non_tensor_batch:
        kwargs["index"] = data.non_tensor_batch["uid"]
    if "reward_baselines" in batch.keys():
        kwargs["reward_baselines"] = batch["reward_baselines"]
    if adv_estimator == AdvantageEstimator.GDPO:
        kwargs["non_tensor_batch"] = data.non_tensor_batch
        kwargs["batch"] = batch
    if adv_estimator in _TOKEN_BASELINE_ESTIMATORS:
        missing = [key for key in ("sum_pi_squared", "old_log_probs") if key not in batch.keys()]
        if missing:
            raise ValueError(
                f"algorithm.adv_estimator={_name(adv_estimator)} needs {missing} in the batch: the actor's "
                "log-prob pass writes old_log_probs, and sum_pi_squared (Σπ² per token) only with "
                "actor_rollout_ref.actor.calculate_sum_pi_squared=True."
            )
        kwargs["sum_pi_squared"] = batch["sum_pi_squared"]
        kwargs["old_log_probs"] = batch["old_log_probs"]
        kwargs["rollout_is_weights"] = batch.get("rollout_is_weights", None)
    return kwargs


def _name(adv_estimator: AdvantageEstimator | str) -> str:
    return str(adv_estimator.value) if isinstance(adv_estimator, AdvantageEstimator) else adv_estimator


def gdpo_reward_metrics(data: DataProto, config: Any) -> dict[str, float]:
    """verl 0.9's ``gdpo/{key}/{mean,std,max,min}`` over the batch, one set per ``algorithm.gdpo_reward_keys`` key
    the batch holds (std: population, NumPy's default); empty unless ``algorithm.adv_estimator=gdpo``."""
    if config is None or config.get("adv_estimator") != AdvantageEstimator.GDPO:
        return {}
    metrics: dict[str, float] = {}
    for key in config.get("gdpo_reward_keys") or []:
        if key in data.non_tensor_batch:
            values = np.asarray(data.non_tensor_batch[key], dtype=np.float32)
            metrics[f"gdpo/{key}/mean"] = float(np.mean(values))
            metrics[f"gdpo/{key}/std"] = float(np.std(values))
            metrics[f"gdpo/{key}/max"] = float(np.max(values))
            metrics[f"gdpo/{key}/min"] = float(np.min(values))
    return metrics


def _pf_ppo_weights(scores: torch.Tensor, reweight_method: str, weight_pow: float) -> torch.Tensor:
    """PF-PPO sample weights from sequence scores ``[B]`` → ``[B]``."""
    if reweight_method == "pow":
        return torch.pow(torch.abs(scores), weight_pow)
    if reweight_method == "max_min":
        return torch.where((scores == scores.max()) | (scores == scores.min()), 1.0, 0.0)
    if reweight_method == "max_random":
        return torch.where(scores == scores.max(), 0.4, 0.1)
    raise ValueError(
        f"algorithm.pf_ppo.reweight_method must be one of ['pow', 'max_min', 'max_random'], got {reweight_method!r}."
    )


def compute_pf_ppo_reweight_data(data: DataProto, reweight_method: str = "pow", weight_pow: float = 2.0) -> DataProto:
    """PF-PPO (Xu et al. 2025, arXiv 2503.06639): resample B rows with replacement, ∝ a weight of the score.

    Weights from s_i = Σ_t token_level_scores: ``pow`` |s|^p, ``max_min`` 1 for the best/worst else 0,
    ``max_random`` 0.4 for the best else 0.1; floored at 1e-8. Per-row ``meta_info`` lists are resampled too.
    """
    scores = _tensors(data)["token_level_scores"].sum(dim=-1)
    with torch.no_grad():
        weights = torch.clamp(
            _pf_ppo_weights(scores, reweight_method, weight_pow) + _PF_PPO_MIN_WEIGHT, min=_PF_PPO_MIN_WEIGHT
        )
    batch_size = scores.shape[0]
    sample_indices = torch.multinomial(weights, batch_size, replacement=True)
    resampled = data.select_idxs(sample_indices)
    rows = sample_indices.cpu().numpy()
    resampled.meta_info = {
        key: [value[i] for i in rows] if isinstance(value, list) and len(value) == batch_size else value
        for key, value in data.meta_info.items()
    }
    return resampled
