"""Driver-side metrics of a PPO step and of validation (verl 0.5 names and module path).

Notation:
    B: responses in the batch, P: max prompt length, R: max response length.
    Keys: ``critic/{score,rewards,advantages,returns,values}/{mean,max,min}``, ``critic/vf_explained_var``,
    ``response_length/*``, ``prompt_length/*``, ``timing_s/*``, ``timing_per_token_ms/*``, ``perf/*``, and (verl 0.9,
    with ``actor.calculate_sum_pi_squared``) ``variance_proxy/*``.

Deviation note: score and reward statistics run over all rows (verl v0.5.0); the later
``response_length_non_aborted/*`` and ``response/aborted_ratio`` keys are added on top (a response
of length 0 counts as aborted), without later verl's error when every response is aborted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from hybridrl.protocol import DataProto
from hybridrl.utils.metric import reduce_metrics
from hybridrl.utils.torch_functional import masked_mean, masked_sum

__all__ = [
    "bootstrap_metric",
    "calc_maj_val",
    "compute_data_metrics",
    "compute_throughout_metrics",
    "compute_timing_metrics",
    "compute_variance_proxy_metrics",
    "process_validation_metrics",
    "reduce_metrics",
]

# Added to Var(R) in the explained variance so a constant-return batch gives a finite value (verl).
_EXPLAINED_VAR_EPS = 1e-5
# Stages whose per-token time is normalised by response tokens only; the others use prompt + response.
_RESPONSE_ONLY_TIMING = ("gen",)
_ALL_TOKEN_TIMING = ("ref", "values", "adv", "update_critic", "update_actor")


def _tensors(batch: DataProto) -> TensorDict:
    if batch.batch is None:
        raise ValueError("Metrics need a DataProto with tensors (batch.batch is None).")
    return batch.batch


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    """``{prefix}/mean``, ``/max``, ``/min`` of a 1-D tensor (float mean)."""
    values = values.float()
    return {
        f"{prefix}/mean": values.mean().item(),
        f"{prefix}/max": values.max().item(),
        f"{prefix}/min": values.min().item(),
    }


def _compute_response_info(batch: DataProto) -> dict[str, torch.Tensor]:
    """Masks and lengths of prompts and responses, from ``attention_mask`` ``[B, P+R]`` and ``responses`` ``[B, R]``.

    The step metrics call this through the module global (as verl does), so tests may patch
    ``hybridrl.trainer.ppo.metric_utils._compute_response_info``.

    Returns:
        ``response_mask`` ``[B, R]`` (the response part of ``attention_mask``), ``prompt_length`` and
        ``response_length`` ``[B]`` (float).
    """
    tensors = _tensors(batch)
    max_response_length = tensors["responses"].shape[-1]
    attention_mask = tensors["attention_mask"]
    response_mask = attention_mask[:, -max_response_length:]
    return {
        "response_mask": response_mask,
        "prompt_length": attention_mask[:, :-max_response_length].sum(-1).float(),
        "response_length": response_mask.sum(-1).float(),
    }


def _length_metrics(prefix: str, lengths: torch.Tensor, max_length: int) -> dict[str, float]:
    return {**_stats(prefix, lengths), f"{prefix}/clip_ratio": torch.eq(lengths, max_length).float().mean().item()}


def _critic_metrics(batch: DataProto, response_mask: torch.Tensor, use_critic: bool) -> dict[str, float]:
    tensors = _tensors(batch)
    valid_adv = torch.masked_select(tensors["advantages"], response_mask)
    valid_returns = torch.masked_select(tensors["returns"], response_mask)
    metrics = {**_stats("critic/advantages", valid_adv), **_stats("critic/returns", valid_returns)}
    if use_critic:
        valid_values = torch.masked_select(tensors["values"], response_mask)
        # explained variance = 1 − Var(R − V) / (Var(R) + eps)
        explained = 1.0 - torch.var(valid_returns - valid_values) / (torch.var(valid_returns) + _EXPLAINED_VAR_EPS)
        metrics.update(_stats("critic/values", valid_values))
        metrics["critic/vf_explained_var"] = explained.item()
    return metrics


def compute_data_metrics(batch: DataProto, use_critic: bool = True) -> dict[str, Any]:
    """Score, reward, advantage, return, value and length statistics of a trained batch.

    Reads ``token_level_scores``, ``token_level_rewards``, ``advantages``, ``returns``, ``response_mask``
    (all ``[B, R]``), ``responses`` ``[B, R]``, ``attention_mask`` ``[B, P+R]``, and ``values`` with a critic.
    """
    tensors = _tensors(batch)
    response_mask = tensors["response_mask"].bool()
    max_response_length = tensors["responses"].shape[-1]
    max_prompt_length = tensors["attention_mask"].shape[-1] - max_response_length
    response_info = _compute_response_info(batch)
    prompt_length, response_length = response_info["prompt_length"], response_info["response_length"]
    metrics: dict[str, Any] = {
        **_stats("critic/score", tensors["token_level_scores"].sum(-1)),
        **_stats("critic/rewards", tensors["token_level_rewards"].sum(-1)),
        **_critic_metrics(batch, response_mask, use_critic),
        **_length_metrics("response_length", response_length, max_response_length),
        **_length_metrics("prompt_length", prompt_length, max_prompt_length),
    }
    aborted = response_length == 0
    metrics["response/aborted_ratio"] = aborted.float().mean().item()
    if bool((~aborted).any()):
        metrics.update(_length_metrics("response_length_non_aborted", response_length[~aborted], max_response_length))
    for key, prefix in (("__num_turns__", "num_turns"), ("tool_call_counts", "tool_call_counts")):
        if key in batch.non_tensor_batch:
            counts = np.asarray(batch.non_tensor_batch[key], dtype=np.float64)
            metrics.update(
                {f"{prefix}/min": counts.min(), f"{prefix}/max": counts.max(), f"{prefix}/mean": counts.mean()}
            )
    return metrics


def compute_timing_metrics(batch: DataProto, timing_raw: dict[str, float]) -> dict[str, Any]:
    """``timing_s/{stage}`` for every timed stage, plus ``timing_per_token_ms/{stage}``.

    ``gen`` is normalised by response tokens; ref, values, adv, update_critic and update_actor by
    prompt + response tokens (verl).
    """
    response_info = _compute_response_info(batch)
    num_response_tokens = response_info["response_length"].sum().item()
    num_all_tokens = response_info["prompt_length"].sum().item() + num_response_tokens
    tokens_of_stage = {
        **dict.fromkeys(_RESPONSE_ONLY_TIMING, num_response_tokens),
        **dict.fromkeys(_ALL_TOKEN_TIMING, num_all_tokens),
    }
    metrics: dict[str, Any] = {f"timing_s/{name}": value for name, value in timing_raw.items()}
    for name in tokens_of_stage.keys() & timing_raw.keys():
        metrics[f"timing_per_token_ms/{name}"] = timing_raw[name] * 1000 / tokens_of_stage[name]
    return metrics


def compute_throughout_metrics(batch: DataProto, timing_raw: dict[str, float], n_gpus: int) -> dict[str, Any]:
    """``perf/total_num_tokens``, ``perf/time_per_step`` and ``perf/throughput`` = tokens / (step time · devices).

    Reads ``meta_info["global_token_num"]`` (per-sample prompt + response tokens) and ``timing_raw["step"]``.
    """
    total_num_tokens = sum(batch.meta_info["global_token_num"])
    step_time = timing_raw["step"]
    return {
        "perf/total_num_tokens": total_num_tokens,
        "perf/time_per_step": step_time,
        "perf/throughput": total_num_tokens / (step_time * n_gpus),
    }


def compute_variance_proxy_metrics(batch: DataProto, gradient_norm: float | None = None) -> dict[str, float]:
    """``variance_proxy/*``: verl 0.9's cheap gauge of the policy gradient's variance, from Σπ² (empty without it).

    W-score per trajectory ``W(τ) = Σ_t [1 − 2π_t(y_t) + Σ_v π_t(v)²]`` over response tokens (``π_t(y_t)`` from
    ``old_log_probs``, ``Σπ²`` = ``sum_pi_squared``, both ``[B, R]``; with ``rollout_is_weights`` ``ρ [B, R]`` each
    term is scaled by ``ρ²``) approximates a token's squared score-function norm, so with ``A`` the trajectory's mean
    advantage over its response tokens:

    - ``proxy2_total_power`` ``E[A² · max(W, 0)]`` (with IS weights: ``E[ρ̄² · A² · max(W_unscaled, 0)]``, ``ρ̄`` the
      mean weight of the trajectory) ≈ ``E‖g_τ‖²``, signal plus noise;
    - ``proxy1_signal_strength`` ``‖ḡ‖²`` = the step's ``actor/grad_norm`` squared (0 without it);
    - ``proxy3_pure_noise`` ``max(0, (proxy2 − proxy1) / (B − 1))``, the variance of the batch-mean gradient;
    - ``expected_a_squared`` ``E[A²]`` and ``expected_w`` ``E[W]``.
    """
    tensors = _tensors(batch)
    if not {"sum_pi_squared", "old_log_probs", "advantages"} <= set(tensors.keys()):
        return {}
    mask = tensors["response_mask"].float()
    w_per_token = 1 - 2 * torch.exp(tensors["old_log_probs"].float()) + tensors["sum_pi_squared"].float()
    weights = tensors["rollout_is_weights"].float() if "rollout_is_weights" in tensors.keys() else None
    if weights is not None:
        w_per_token = w_per_token * weights.square()
    advantage = masked_mean(tensors["advantages"].float(), mask, axis=-1)
    w_score = masked_sum(w_per_token, mask, axis=-1)
    if weights is None:
        total_power = (advantage.square() * w_score.clamp(min=0.0)).mean()
    else:  # verl divides the scaled terms back by ρ² (clamped), so tokens with ρ = 0 stay out of W
        unscaled = masked_sum(w_per_token / weights.square().clamp(min=1e-10), mask, axis=-1).clamp(min=0.0)
        total_power = (masked_mean(weights, mask, axis=-1).square() * advantage.square() * unscaled).mean()
    signal = gradient_norm**2 if gradient_norm is not None else None
    rows = advantage.shape[0]
    noise = max(0.0, (total_power.item() - signal) / (rows - 1)) if signal is not None and rows > 1 else 0.0
    return {
        "variance_proxy/proxy1_signal_strength": signal if signal is not None else 0.0,
        "variance_proxy/proxy2_total_power": total_power.item(),
        "variance_proxy/proxy3_pure_noise": noise,
        "variance_proxy/expected_a_squared": advantage.square().mean().item(),
        "variance_proxy/expected_w": w_score.mean().item(),
    }


# ---------------------------------------------------------------------------
# Validation metrics
# ---------------------------------------------------------------------------


def bootstrap_metric(
    data: Sequence[Any],
    subset_size: int,
    reduce_fns: Sequence[Callable[[Any], float]],
    n_bootstrap: int = 1000,
    seed: int = 42,
) -> list[tuple[float, float]]:
    """Mean and std of each ``reduce_fn`` over ``n_bootstrap`` resamples (with replacement) of size ``subset_size``.

    Draws the same indices as verl's ``np.random.seed(seed)`` + ``np.random.choice`` loop, from a
    private ``RandomState`` so the global NumPy RNG is left untouched.
    """
    indices = np.random.RandomState(seed).choice(len(data), size=(n_bootstrap, subset_size), replace=True)
    results: list[list[float]] = [[] for _ in reduce_fns]
    for row in indices:
        resample = [data[i] for i in row]
        for out, reduce_fn in zip(results, reduce_fns):
            out.append(reduce_fn(resample))
    return [(float(np.mean(out)), float(np.std(out))) for out in results]


def calc_maj_val(data: Sequence[dict[str, Any]], vote_key: str, val_key: str) -> Any:
    """``val_key`` of the first sample whose ``vote_key`` is the most common vote (ties: first seen)."""
    vote_to_vals: dict[Any, list[Any]] = defaultdict(list)
    for sample in data:
        vote_to_vals[sample[vote_key]].append(sample[val_key])
    majority = max(vote_to_vals, key=lambda vote: len(vote_to_vals[vote]))
    return vote_to_vals[majority][0]


def _subset_sizes(n_resps: int) -> list[int]:
    """k = 2, 4, 8, … below n, then n itself (verl)."""
    sizes, k = [], 2
    while k < n_resps:
        sizes.append(k)
        k *= 2
    return [*sizes, n_resps]


def _prompt_metrics(var_vals: list[Any], preds: list[Any] | None, seed: int) -> dict[str, float]:
    """mean@N, std@N, best@k, worst@k (and maj@k with predictions) of one prompt's N responses."""
    n_resps = len(var_vals)
    metrics = {f"mean@{n_resps}": float(np.mean(var_vals))}
    if n_resps == 1:
        return metrics
    metrics[f"std@{n_resps}"] = float(np.std(var_vals))
    for k in _subset_sizes(n_resps):
        (best_mean, best_std), (worst_mean, worst_std) = bootstrap_metric(var_vals, k, [np.max, np.min], seed=seed)
        metrics.update({f"best@{k}/mean": best_mean, f"best@{k}/std": best_std})
        metrics.update({f"worst@{k}/mean": worst_mean, f"worst@{k}/std": worst_std})
        if preds is not None:
            votes = [{"val": val, "pred": pred} for val, pred in zip(var_vals, preds, strict=True)]
            maj = partial(calc_maj_val, vote_key="pred", val_key="val")
            [(maj_mean, maj_std)] = bootstrap_metric(votes, k, [maj], seed=seed)
            metrics.update({f"maj@{k}/mean": maj_mean, f"maj@{k}/std": maj_std})
    return metrics


def process_validation_metrics(
    data_sources: Sequence[str], sample_inputs: Sequence[Any], infos_dict: dict[str, Sequence[Any]], seed: int = 42
) -> dict[str, dict[str, dict[str, float]]]:
    """Per data source and variable, validation metrics averaged over prompts.

    Responses are grouped by ``sample_inputs`` (the prompt text in verl 0.5, or its uid); string
    variables (e.g. ``pred``) are not scored but feed majority voting.

    Returns:
        ``{data_source: {var_name: {"mean@N" | "std@N" | "best@k/mean" | "worst@k/std" | "maj@k/mean" ...: value}}}``
    """
    grouped: dict[str, dict[Any, dict[str, list[Any]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for i, data_source in enumerate(data_sources):
        for var_name, var_vals in infos_dict.items():
            grouped[data_source][sample_inputs[i]][var_name].append(var_vals[i])

    per_prompt: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for data_source, prompts in grouped.items():
        for var2vals in prompts.values():
            preds = var2vals.get("pred")
            for var_name, var_vals in var2vals.items():
                if isinstance(var_vals[0], str):
                    continue
                for metric_name, value in _prompt_metrics(var_vals, preds, seed).items():
                    per_prompt[data_source][var_name][metric_name].append(value)

    return {
        data_source: {
            var_name: {metric: float(np.mean(vals)) for metric, vals in metrics.items()}
            for var_name, metrics in var2metrics.items()
        }
        for data_source, var2metrics in per_prompt.items()
    }
