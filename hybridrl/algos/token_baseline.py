"""Optimal Token Baseline (OTB) advantage estimators as pure, vectorised tensor functions (verl v0.9.0).

OTB (arXiv 2602.07078) replaces the one-number group baseline of GRPO/RLOO by a baseline per token:
within a prompt group, the returns-to-go at token t are averaged with weights W_t, a forward-only
proxy of the gradient variance the response has accumulated up to t ("realized energy"). Tokens of
noisy paths weigh more in predicting the return, which is the variance-optimal baseline under the
proxy. The actor supplies Σ_v π(v)² per token (``actor_rollout_ref.actor.calculate_sum_pi_squared``).

    G_{i,t} = Σ_{t'≥t} r_{i,t'} m_{i,t'}                         reward-to-go
    w_{i,t} = (1 − 2 π_{i,t} + Σ_v π_{i,t}(v)²) · ρ_{i,t}²          variance proxy (ρ: rollout IS weight, else 1)
    W_{i,t} = Σ_{j≤t} w_{i,j} m_{i,j}                             realized energy up to t
    B_{g,t} = Σ_{i∈g} G_{i,t} W_{i,t} m_{i,t} / (Σ_{i∈g} W_{i,t} m_{i,t} + ε)
    A_{i,t} = (G_{i,t} − B_{g(i),t}) · m_{i,t}

The two registered variants differ in what "token t" means:
    optimal_token_baseline      t is the position in the response tensor (single turn: the t-th
                                token of every response of a group lines up).
    tir_optimal_token_baseline  t is the rank among the response's generated tokens (multi-turn,
                                tool-integrated: the k-th generated token of each response lines
                                up, whatever tool observations came before it); a response with no
                                generated token is left out of its group.

Choices kept from verl (not in the paper's formula):
    - a group of one response gets B = 0, so A = G.
    - ``handle_zero_tail``: when one response of a group is strictly the longest, its baseline is 0
      beyond the second-longest response's length, where no other response informs it.

Notation:
    B: batch size, T: response length, G: number of groups (uids), L_i = Σ_t m_{i,t}.
    π_{i,t} = exp(old log-prob of the sampled token); ε (epsilon) keeps the division finite.
"""

from __future__ import annotations

import torch

from hybridrl.algos.advantages import GroupIndex, group_ids_from_index

__all__ = [
    "OTB_EPSILON",
    "optimal_token_baseline_advantage",
    "realized_energy",
    "tir_optimal_token_baseline_advantage",
]

# verl's default ε of the OTB division: only guards an all-zero weight column (e.g. past every response's end).
OTB_EPSILON = 1e-8


def realized_energy(
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """W_{i,t} = Σ_{j≤t} (1 − 2 π_{i,j} + Σπ²_{i,j}) · ρ_{i,j}² · m_{i,j}: all ``[B, T]`` → ``[B, T]``."""
    # w_t = ||∇ log π(a_t)||² proxy through the logits: 1 − 2π_t + Σ_v π_t(v)²
    per_token = 1 - 2 * torch.exp(old_log_probs) + sum_pi_squared
    if rollout_is_weights is not None:
        # truncated IS scales the gradient by ρ, its squared norm by ρ²
        per_token = per_token * rollout_is_weights**2
    return (per_token * response_mask).cumsum(dim=-1)


def _reward_to_go(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """G_{i,t} = Σ_{t'≥t} r_{i,t'} m_{i,t'}: ``[B, T]`` → ``[B, T]``."""
    return (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])


def _group_token_baseline(
    returns: torch.Tensor,
    energy: torch.Tensor,
    mask: torch.Tensor,
    index: GroupIndex,
    members: torch.Tensor,
    handle_zero_tail: bool,
    epsilon: float,
) -> torch.Tensor:
    """B_{g(i),t} for every row: returns, energy, mask ``[B, T]``; members ``[B]`` bool (rows counted in
    their group; the others get B = 0) → ``[B, T]``."""
    ids, num_groups = group_ids_from_index(index, returns.device)
    weight = energy * mask * members.unsqueeze(-1).to(energy.dtype)
    width = returns.shape[-1]
    # B_{g,t} = Σ_{i∈g} G_{i,t} W_{i,t} m_{i,t} / (Σ_{i∈g} W_{i,t} m_{i,t} + ε)
    numerator = torch.zeros(num_groups, width, dtype=returns.dtype, device=returns.device).index_add_(
        0, ids, returns * weight
    )
    denominator = torch.zeros(num_groups, width, dtype=returns.dtype, device=returns.device).index_add_(0, ids, weight)
    baseline = (numerator / (denominator + epsilon))[ids]
    group_size = torch.bincount(ids[members], minlength=num_groups)[ids]
    has_baseline = members & (group_size > 1)  # a lone response: B = 0
    baseline = torch.where(has_baseline.unsqueeze(-1), baseline, torch.zeros_like(baseline))
    if handle_zero_tail:
        lengths = mask.sum(dim=-1).to(torch.long)
        baseline = baseline.masked_fill(_unshared_tail(lengths, ids, num_groups, has_baseline, width), 0.0)
    return baseline


def _unshared_tail(
    lengths: torch.Tensor, ids: torch.Tensor, num_groups: int, candidates: torch.Tensor, width: int
) -> torch.Tensor:
    """``[B, T]`` True at t ≥ L_second(g) for the strictly longest response of each group (among ``candidates``)."""
    absent = torch.full_like(lengths, -1)
    lengths_in = torch.where(candidates, lengths, absent)
    max_g = torch.full((num_groups,), -1, dtype=lengths.dtype, device=lengths.device)
    max_g = max_g.scatter_reduce(0, ids, lengths_in, "amax")
    is_max = candidates & (lengths == max_g[ids])
    unique_max_g = torch.bincount(ids[is_max], minlength=num_groups) == 1
    second_g = torch.full((num_groups,), -1, dtype=lengths.dtype, device=lengths.device)
    second_g = second_g.scatter_reduce(0, ids, torch.where(is_max, absent, lengths_in), "amax")
    tail_rows = is_max & unique_max_g[ids]
    positions = torch.arange(width, device=lengths.device)
    return tail_rows.unsqueeze(-1) & (positions.unsqueeze(0) >= second_g[ids].unsqueeze(-1))


def optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = OTB_EPSILON,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB with t = the position in the response tensor (verl's ``optimal_token_baseline``).

    Args:
        token_level_rewards: ``[B, T]`` r_{i,t}. response_mask: ``[B, T]`` m_{i,t}. index: ``[B]`` uid.
        old_log_probs: ``[B, T]`` log π_{i,t} of the sampled tokens. sum_pi_squared: ``[B, T]`` Σ_v π_{i,t}(v)².
        rollout_is_weights: ``[B, T]`` ρ_{i,t}, or None. handle_zero_tail: see the module docstring. epsilon: ε.

    Returns:
        advantages ``[B, T]`` = (G − B)·m, returns ``[B, T]`` = G.
    """
    with torch.no_grad():
        returns = _reward_to_go(token_level_rewards, response_mask)
        energy = realized_energy(old_log_probs, sum_pi_squared, response_mask, rollout_is_weights)
        every_row = torch.ones(returns.shape[0], dtype=torch.bool, device=returns.device)
        baseline = _group_token_baseline(returns, energy, response_mask, index, every_row, handle_zero_tail, epsilon)
        advantages = (returns - baseline) * response_mask
    return advantages, returns


def tir_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = OTB_EPSILON,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB with t = the rank among generated tokens (verl's ``tir_optimal_token_baseline``, multi-turn).

    The generated tokens of each response are packed to the left (``[B, T]`` → ``[B, L_max]``), the
    position-wise OTB runs on the packed tensors, and the advantages go back to their positions.
    Arguments and returns as :func:`optimal_token_baseline_advantage`.
    """
    with torch.no_grad():
        returns = _reward_to_go(token_level_rewards, response_mask)
        energy = realized_energy(old_log_probs, sum_pi_squared, response_mask, rollout_is_weights)
        generated = response_mask.bool()
        lengths = generated.sum(dim=-1)
        rows, cols = generated.nonzero(as_tuple=True)
        rank = (generated.cumsum(dim=-1) - 1)[rows, cols]  # k: the token's rank among the row's generated ones
        packed_width = int(lengths.max().item()) if lengths.numel() > 0 else 0
        packed_returns = returns.new_zeros(returns.shape[0], packed_width)
        packed_energy = torch.zeros_like(packed_returns)
        packed_returns[rows, rank] = returns[rows, cols]
        packed_energy[rows, rank] = energy[rows, cols]
        packed_mask = (torch.arange(packed_width, device=lengths.device) < lengths.unsqueeze(-1)).to(returns.dtype)
        baseline = _group_token_baseline(
            packed_returns, packed_energy, packed_mask, index, lengths > 0, handle_zero_tail, epsilon
        )
        advantages = torch.zeros_like(returns)
        advantages[rows, cols] = (packed_returns - baseline)[rows, rank]
        advantages = advantages * response_mask
    return advantages, returns
