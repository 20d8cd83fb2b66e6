"""Advantage estimators as pure, vectorised tensor functions (numerics of verl v0.9.0).

Every function is tensors in, tensors out: no config objects, no Python loop over samples. Group
statistics (GRPO, GDPO, RLOO, OPO, GPG, REINFORCE++-baseline) are computed with ``index_add_`` /
``scatter_reduce_`` over dense group ids obtained from the ``uid`` labels. The recursive estimators
(GAE, REINFORCE++) scan over the time axis only, vectorised over the batch. The verl-signature
entry points (which take ``config`` and ``**kwargs``) and the ``ADV_ESTIMATOR_REGISTRY`` live in
``hybridrl.trainer.ppo.core_algos``; the optimal-token-baseline family is in
``hybridrl.algos.token_baseline``.

Papers → deviation from the paper:
    GAE             Schulman et al. 2015, arXiv 1506.02438 → masked tokens are skipped in the
                    recursion; advantages whitened over the batch's valid tokens (returns are not).
    GRPO            Shao et al. 2024, arXiv 2402.03300 → outcome reward only; σ is torch.std
                    (unbiased) plus ε = 1e-6; a lone response per prompt gets μ = 0, σ = 1.
                    ``norm_adv_by_std_in_grpo=False`` is Dr.GRPO (Liu et al. 2025, arXiv 2503.20783).
    GRPO pass@k     Chen et al. 2025, arXiv 2503.19595 → only the best response of each group gets
                    r_max − r_2nd (÷ σ + ε when normalising); needs ≥ 2 responses per prompt.
    GDPO            arXiv 2601.05242 → each reward component GRPO-normalised in its group,
                    weighted sum, then whitened over the batch's valid tokens.
    RLOO            Ahmadian et al. 2024, arXiv 2402.14740 → a lone response keeps its raw score
                    (``rloo``) or gets 0 (``rloo_vectorized``).
    REINFORCE++     Hu 2025, arXiv 2501.03262 → returns whitened over the batch; masked tokens
                    (tool observations) are skipped, the return carried across them undiscounted.
                    The baseline variant subtracts the group mean first.
    ReMax           Li et al. 2023, arXiv 2310.10505 → baseline = reward of the greedy response.
    OPO             Hao et al. 2025, arXiv 2505.23585 → length-weighted group-mean baseline.
    GPG             Chu et al. 2025, arXiv 2504.02546 → α = B / #nonzero scores, f_norm = 1
                    (no std normalisation).

Notation:
    B: batch size (responses), T: response length, G: number of groups (distinct uids).
    r_{i,t}: token-level reward, m_{i,t}: response mask (1 = generated token), V_{i,t}: critic value.
    s_i = Σ_t r_{i,t}: outcome score of response i; g(i): the group (prompt) of response i.
    n_g, μ_g, σ_g: size, mean and unbiased (Bessel) std of the scores in group g.
    c_{i,k}, w_k: reward component k of response i and its weight (GDPO).
    γ (gamma): discount, λ (lam): GAE mixing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hybridrl.utils import torch_functional as verl_F

__all__ = [
    "GROUP_STD_EPSILON",
    "GroupIndex",
    "compute_gae_advantage_return",
    "gdpo_outcome_advantage",
    "gpg_outcome_advantage",
    "group_ids_from_index",
    "group_mean_std",
    "grpo_outcome_advantage",
    "grpo_passk_outcome_advantage",
    "opo_outcome_advantage",
    "reinforce_plus_plus_advantage",
    "reinforce_plus_plus_baseline_advantage",
    "remax_outcome_advantage",
    "rloo_outcome_advantage",
]

# Added to σ_g before dividing (verl's default ``epsilon``): a group whose scores are all equal has
# σ_g = 0, and its advantages must come out 0, not NaN.
GROUP_STD_EPSILON = 1e-6

GroupIndex = np.ndarray | Sequence[Any] | torch.Tensor


# ---------------------------------------------------------------------------
# Group helpers
# ---------------------------------------------------------------------------


def group_ids_from_index(index: GroupIndex, device: torch.device | None = None) -> tuple[torch.Tensor, int]:
    """Map group labels (``uid`` strings, ints, or a tensor) to dense ids ``0..G-1``.

    Args:
        index: ``[B]`` group label per response (verl passes ``non_tensor_batch["uid"]``).
        device: device of the returned ids.

    Returns:
        ids: ``[B]`` int64 group id per response; num_groups: G.
    """
    if isinstance(index, torch.Tensor):
        _, inverse = torch.unique(index.reshape(-1), return_inverse=True)
        ids = inverse.to(device=device, dtype=torch.long)
    else:
        _, inverse_np = np.unique(np.asarray(index).reshape(-1), return_inverse=True)
        ids = torch.as_tensor(inverse_np.reshape(-1), dtype=torch.long, device=device)
    num_groups = int(ids.max().item()) + 1 if ids.numel() > 0 else 0
    return ids, num_groups


def _group_sum(values: torch.Tensor, ids: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Σ over each group: values ``[B]``, ids ``[B]`` → ``[G]``."""
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, ids, values)


def group_mean_std(scores: torch.Tensor, index: GroupIndex) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-response group size, mean and unbiased std of ``scores``, with verl's singleton rule.

    A group of one response gets μ = 0 and σ = 1 (verl: "no baseline" for a lone sample), so
    GRPO leaves its score unchanged up to the epsilon.

    Args:
        scores: ``[B]`` outcome scores s_i.
        index: ``[B]`` group labels.

    Returns:
        count ``[B]`` (n_{g(i)}, same dtype as scores), mean ``[B]`` (μ_{g(i)}), std ``[B]`` (σ_{g(i)}).
    """
    ids, num_groups = group_ids_from_index(index, scores.device)
    count_g = _group_sum(torch.ones_like(scores), ids, num_groups)
    # μ_g = Σ_{i∈g} s_i / n_g
    mean_g = _group_sum(scores, ids, num_groups) / count_g
    # σ_g² = Σ_{i∈g} (s_i − μ_g)² / (n_g − 1)   (torch.std's Bessel correction)
    squared_dev_g = _group_sum((scores - mean_g[ids]) ** 2, ids, num_groups)
    std_g = torch.sqrt(squared_dev_g / (count_g - 1).clamp(min=1))
    singleton_g = count_g == 1
    mean_g = torch.where(singleton_g, torch.zeros_like(mean_g), mean_g)
    std_g = torch.where(singleton_g, torch.ones_like(std_g), std_g)
    return count_g[ids], mean_g[ids], std_g[ids]


def _broadcast_over_tokens(per_sequence: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """A_{i,t} = a_i · m_{i,t}: ``[B]`` → ``[B, T]``."""
    return per_sequence.unsqueeze(-1) * response_mask


# ---------------------------------------------------------------------------
# Critic-based and return-based estimators
# ---------------------------------------------------------------------------


def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2015), whitened over the valid tokens.

    Masked tokens (m = 0) are skipped: the next value and the running advantage are carried
    through them unchanged, so a padding or observation token neither bootstraps nor resets
    the recursion (verl v0.5.0 behaviour).

    Args:
        token_level_rewards: ``[B, T]`` r_{i,t}.
        values: ``[B, T]`` V_{i,t}.
        response_mask: ``[B, T]`` m_{i,t}.
        gamma: γ. lam: λ.

    Returns:
        advantages ``[B, T]`` (masked-whitened over the batch), returns ``[B, T]`` = A + V (unwhitened A).
    """
    with torch.no_grad():
        mask = response_mask.to(values.dtype)
        next_value = torch.zeros_like(values[:, 0])
        last_gae = torch.zeros_like(values[:, 0])
        advantages = torch.zeros_like(values)
        for t in reversed(range(values.shape[-1])):
            # δ_t = r_t + γ V_{t+1} − V_t
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            # A_t = δ_t + γ λ A_{t+1}; at a masked token keep the carried A_{t+1} and V_{t+1}
            gae_t = delta + gamma * lam * last_gae
            next_value = values[:, t] * mask[:, t] + (1 - mask[:, t]) * next_value
            last_gae = gae_t * mask[:, t] + (1 - mask[:, t]) * last_gae
            advantages[:, t] = last_gae
        returns = advantages + values
        advantages = verl_F.masked_whiten(advantages, response_mask)
    return advantages, returns


def reinforce_plus_plus_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025): discounted return-to-go over the generated tokens, whitened over the batch.

    Masked tokens (m = 0: tool observations inside a multi-turn response, padding after it) are
    skipped, as GAE skips them: the running return crosses them unchanged and undiscounted, and
    their own return is 0. So every assistant turn before a tool call sees the outcome reward that
    sits on the last generated token (verl 0.9; verl 0.5 reset the return at every masked token,
    which left the earlier turns with a return of 0). A reward placed on a masked token is dropped.

    Args:
        token_level_rewards: ``[B, T]`` r_{i,t}. response_mask: ``[B, T]`` m_{i,t}. gamma: γ.

    Returns:
        advantages ``[B, T]`` = whiten(G)·m, returns ``[B, T]`` = G (0 at masked tokens).
    """
    with torch.no_grad():
        returns = torch.zeros_like(token_level_rewards)
        running = torch.zeros_like(token_level_rewards[:, 0])
        for t in reversed(range(token_level_rewards.shape[-1])):
            mask_t = response_mask[:, t]
            # G_t = r_t + γ G_{t'}, with t' the next generated token after t
            candidate = token_level_rewards[:, t] + gamma * running
            returns[:, t] = candidate * mask_t
            # at a masked token keep the carried G_{t'} as it is
            running = candidate * mask_t + running * (1 - mask_t)
        advantages = verl_F.masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


def remax_outcome_advantage(
    token_level_rewards: torch.Tensor, reward_baselines: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (Li et al. 2023): return-to-go minus the greedy response's reward b_i.

    Args:
        token_level_rewards: ``[B, T]``. reward_baselines: ``[B]`` b_i. response_mask: ``[B, T]``.

    Returns:
        advantages ``[B, T]`` = G − b·m, returns ``[B, T]`` = G_t = Σ_{t'≥t} r_{t'} m_{t'}.
    """
    with torch.no_grad():
        returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
        advantages = returns - _broadcast_over_tokens(reward_baselines, response_mask)
    return advantages, returns


# ---------------------------------------------------------------------------
# Group-baseline (outcome) estimators
# ---------------------------------------------------------------------------


def _grpo_scalars(
    scores: torch.Tensor, index: GroupIndex, epsilon: float, norm_adv_by_std_in_grpo: bool
) -> torch.Tensor:
    """a_i = (s_i − μ_g) / (σ_g + ε), or s_i − μ_g: scores ``[B]`` → ``[B]``."""
    _, mean, std = group_mean_std(scores, index)
    centred = scores - mean
    return centred / (std + epsilon) if norm_adv_by_std_in_grpo else centred


def grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    epsilon: float = GROUP_STD_EPSILON,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (Shao et al. 2024) / Dr.GRPO (Liu et al. 2025, ``norm_adv_by_std_in_grpo=False``).

    A_i = (s_i − μ_g) / (σ_g + ε), or s_i − μ_g without the std; broadcast over tokens.

    Args:
        token_level_rewards: ``[B, T]``. response_mask: ``[B, T]``. index: ``[B]`` uid per response.
        epsilon: ε. norm_adv_by_std_in_grpo: divide by σ_g.

    Returns:
        advantages ``[B, T]``, returns ``[B, T]`` (equal to the advantages).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        per_sequence = _grpo_scalars(scores, index, epsilon, norm_adv_by_std_in_grpo)
        advantages = _broadcast_over_tokens(per_sequence, response_mask)
    return advantages, advantages.clone()


def gdpo_outcome_advantage(
    reward_components: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    component_weights: torch.Tensor | None = None,
    epsilon: float = GROUP_STD_EPSILON,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO (arXiv 2601.05242): GRPO-normalise each reward component in its group, then sum and whiten.

    A_{i,k} = (c_{i,k} − μ_{g,k}) / (σ_{g,k} + ε)   (each component k on its own, GRPO's singleton rule)
    A_i     = Σ_k w_k A_{i,k}                        (w_k = 1 by default)
    A       = whiten(A_i·m)·m                        (over the batch's valid tokens)

    Args:
        reward_components: ``[B, K]`` c_{i,k}, one column per reward component.
        response_mask: ``[B, T]``. index: ``[B]`` uid per response.
        component_weights: ``[K]`` w_k, or None for equal weights.
        epsilon: ε. norm_adv_by_std_in_grpo: divide each component by σ_{g,k}.

    Returns:
        advantages ``[B, T]``, returns ``[B, T]`` (equal).
    """
    with torch.no_grad():
        per_component = torch.stack(
            [_grpo_scalars(c, index, epsilon, norm_adv_by_std_in_grpo) for c in reward_components.unbind(-1)], dim=-1
        )
        if component_weights is None:
            component_weights = torch.ones(reward_components.shape[-1], dtype=torch.float32)
        weighted = (per_component * component_weights.to(per_component.device)).sum(dim=-1)
        summed = _broadcast_over_tokens(weighted, response_mask)
        advantages = verl_F.masked_whiten(summed, response_mask) * response_mask
    return advantages, advantages.clone()


def grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    epsilon: float = GROUP_STD_EPSILON,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k GRPO (Chen et al. 2025, arXiv 2503.19595): only each group's best response learns.

    A_best = (r_max − r_2nd) [/ (σ_g + ε)], every other response gets 0. On ties r_max = r_2nd, so
    the advantage is 0 whichever tied response is called "best".

    Raises:
        ValueError: if a group has fewer than 2 responses.

    Returns:
        advantages ``[B, T]``, returns ``[B, T]`` (equal).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        ids, num_groups = group_ids_from_index(index, scores.device)
        count_g = torch.bincount(ids, minlength=num_groups)
        if bool((count_g < 2).any()):
            raise ValueError(
                f"grpo_passk needs at least 2 responses per prompt (uid); got group sizes {count_g.tolist()}. "
                "Set actor_rollout_ref.rollout.n >= 2."
            )
        max_g = torch.full((num_groups,), -torch.inf, dtype=scores.dtype, device=scores.device).scatter_reduce_(
            0, ids, scores, "amax"
        )
        positions = torch.arange(scores.numel(), device=scores.device)
        is_max = scores == max_g[ids]
        # first position holding the group max = the "best" response
        best_pos_g = torch.full((num_groups,), scores.numel(), dtype=torch.long, device=scores.device).scatter_reduce_(
            0, ids, torch.where(is_max, positions, scores.numel()), "amin"
        )
        is_best = positions == best_pos_g[ids]
        others = torch.where(is_best, torch.full_like(scores, -torch.inf), scores)
        second_g = torch.full((num_groups,), -torch.inf, dtype=scores.dtype, device=scores.device).scatter_reduce_(
            0, ids, others, "amax"
        )
        gap = max_g[ids] - second_g[ids]
        if norm_adv_by_std_in_grpo:
            _, _, std = group_mean_std(scores, index)
            gap = gap / (std + epsilon)
        per_sequence = torch.where(is_best, gap, torch.zeros_like(gap))
        advantages = _broadcast_over_tokens(per_sequence, response_mask)
    return advantages, advantages.clone()


def rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    lone_response_keeps_score: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO (Ahmadian et al. 2024): A_i = s_i − mean of the other responses of the prompt.

    Computed as n/(n−1)·s_i − n/(n−1)·μ_g (verl's order of operations). A lone response has no
    other to compare with: it keeps s_i (verl's ``rloo``) or gets 0 (``lone_response_keeps_score=False``,
    verl's ``rloo_vectorized``).

    Returns:
        advantages ``[B, T]``, returns ``[B, T]`` (equal).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        count, mean, _ = group_mean_std(scores, index)
        leave_one_out = scores * count / (count - 1) - mean * count / (count - 1)
        lone = scores if lone_response_keeps_score else torch.zeros_like(scores)
        per_sequence = torch.where(count > 1, leave_one_out, lone)
        advantages = _broadcast_over_tokens(per_sequence, response_mask)
    return advantages, advantages.clone()


def opo_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: GroupIndex
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO (Hao et al. 2025, arXiv 2505.23585): length-weighted group baseline.

    A_i = s_i − Σ_{j∈g} L_j s_j / Σ_{j∈g} L_j with L_j = Σ_t m_{j,t}; a singleton has baseline 0.

    Returns:
        advantages ``[B, T]``, returns ``[B, T]`` (equal).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        lengths = response_mask.sum(dim=-1).to(scores.dtype)
        ids, num_groups = group_ids_from_index(index, scores.device)
        count_g = torch.bincount(ids, minlength=num_groups)
        baseline_g = _group_sum(lengths * scores, ids, num_groups) / _group_sum(lengths, ids, num_groups)
        baseline_g = torch.where(count_g > 1, baseline_g, torch.zeros_like(baseline_g))
        advantages = _broadcast_over_tokens(scores - baseline_g[ids], response_mask)
    return advantages, advantages.clone()


def gpg_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: GroupIndex, f_norm: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG (Chu et al. 2025, arXiv 2504.02546): batch-rescaled group-centred score.

    α = B / max(#{i : s_i ≠ 0}, 1); A_i = α (s_i − μ_g) / f_norm (singleton: μ = 0).

    Returns:
        advantages ``[B, T]``, returns ``[B, T]`` (equal).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        alpha = scores.shape[0] / torch.count_nonzero(scores).clamp(min=1)
        _, mean, _ = group_mean_std(scores, index)
        advantages = _broadcast_over_tokens(alpha * (scores - mean) / f_norm, response_mask)
    return advantages, advantages.clone()


def reinforce_plus_plus_baseline_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: GroupIndex
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline (Hu 2025): group-centred score, whitened over the batch's valid tokens.

    A = whiten((s_i − μ_g)·m)·m (singleton: μ = 0).

    Returns:
        advantages ``[B, T]``, returns ``[B, T]`` (equal).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        _, mean, _ = group_mean_std(scores, index)
        centred = _broadcast_over_tokens(scores - mean, response_mask)
        advantages = verl_F.masked_whiten(centred, response_mask) * response_mask
    return advantages, advantages.clone()
