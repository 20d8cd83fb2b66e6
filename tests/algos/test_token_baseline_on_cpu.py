"""Optimal token baseline (optimal_token_baseline, tir_optimal_token_baseline): hand-computed values, loop references."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch

from hybridrl.trainer.ppo import core_algos
from hybridrl.trainer.ppo.core_algos import AdvantageEstimator, get_adv_estimator_fn

OTB = core_algos.compute_optimal_token_baseline_advantage
TIR = core_algos.compute_multi_turn_optimal_token_baseline_advantage
HALF = math.log(0.5)


def constant_proxy(mask: torch.Tensor, sum_pi_squared: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """π = 0.5 and Σπ² = 0.5 on every token: w = 1 − 2·0.5 + 0.5 = 0.5 per generated token."""
    return torch.full(mask.shape, HALF), torch.full(mask.shape, sum_pi_squared)


# ---------------------------------------------------------------------------
# Hand-computed values
# ---------------------------------------------------------------------------


def test_otb_hand_computed_with_zero_tail_and_singleton():
    # group a: row 0 (3 tokens, reward 1 at the end), row 1 (2 tokens, reward 3 at the end); group b: row 2 alone
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 3.0, 0.0], [0.0, 2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    old_log_probs, sum_pi_squared = constant_proxy(mask)
    sum_pi_squared[1, 1] = 1.5  # row 1, t=1: w = 1 − 1 + 1.5 = 1.5
    index = np.array(["a", "a", "b"], dtype=object)
    adv, ret = OTB(rewards, mask, index, old_log_probs, sum_pi_squared)
    # G: row 0 [1, 1, 1], row 1 [3, 3, 0], row 2 [2, 2, 0]
    # W: row 0 [0.5, 1, 1.5], row 1 [0.5, 2, 2]
    # B_0 = (1·0.5 + 3·0.5)/(0.5 + 0.5) = 2; B_1 = (1·1 + 3·2)/(1 + 2) = 7/3; B_2 = 1·1.5/1.5 = 1
    # zero tail: row 0 is the only longest (3 > 2), so its B is 0 from t = 2 on
    # row 0: [1 − 2, 1 − 7/3, 1 − 0]; row 1: [3 − 2, 3 − 7/3, masked]; row 2 (alone): A = G
    assert ret.tolist() == [[1.0, 1.0, 1.0], [3.0, 3.0, 0.0], [2.0, 2.0, 0.0]]
    expected = torch.tensor([[-1.0, -4 / 3, 1.0], [1.0, 2 / 3, 0.0], [2.0, 2.0, 0.0]])
    torch.testing.assert_close(adv, expected)
    adv_no_tail, _ = OTB(rewards, mask, index, old_log_probs, sum_pi_squared, handle_zero_tail=False)
    # without the tail rule row 0 keeps B_2 = 1: 1 − 1 = 0
    assert adv_no_tail[0, 2].item() == pytest.approx(0.0, abs=1e-6)


def test_otb_rollout_is_weights_scale_the_energy_by_rho_squared():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 3.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    old_log_probs, sum_pi_squared = constant_proxy(mask)
    weights = torch.ones_like(mask)
    weights[1, 0] = 2.0
    adv, _ = OTB(rewards, mask, np.array(["a", "a"]), old_log_probs, sum_pi_squared, rollout_is_weights=weights)
    # row 1, t=0: w = 0.5·2² = 2 → W_0: row 0 0.5, row 1 2 → B_0 = (1·0.5 + 3·2)/2.5 = 2.6
    assert adv[:, 0].tolist() == pytest.approx([1 - 2.6, 3 - 2.6], abs=1e-5)


def test_tir_lines_up_generated_tokens_across_tool_observations():
    # row 0: a generated token, a 2-token tool observation, 2 generated tokens (reward 1 at the end)
    # row 1: 3 generated tokens then padding (reward 0)
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0, 0.0]])
    old_log_probs, sum_pi_squared = constant_proxy(mask)
    index = np.array(["a", "a"], dtype=object)
    tir, _ = TIR(rewards, mask, index, old_log_probs, sum_pi_squared)
    # by rank k: G row 0 [1, 1, 1], row 1 [0, 0, 0]; W both [0.5, 1, 1.5] → B_k = (1·W + 0·W)/(2W) = 0.5
    # equal lengths (3, 3): no tail. A row 0 = 0.5 at its generated positions 0, 3, 4; row 1 = −0.5 at 0, 1, 2
    expected = torch.tensor([[0.5, 0.0, 0.0, 0.5, 0.5], [-0.5, -0.5, -0.5, 0.0, 0.0]])
    torch.testing.assert_close(tir, expected)
    otb, _ = OTB(rewards, mask, index, old_log_probs, sum_pi_squared)
    # by position only t = 0 is shared: B_0 = 0.5; elsewhere one response alone sets B_t = its own G_t → A = 0
    torch.testing.assert_close(otb, torch.tensor([[0.5, 0.0, 0.0, 0.0, 0.0], [-0.5, 0.0, 0.0, 0.0, 0.0]]))


def test_tir_leaves_empty_responses_out_of_the_group():
    rewards = torch.tensor([[0.0, 2.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    old_log_probs, sum_pi_squared = constant_proxy(mask)
    adv, _ = TIR(rewards, mask, np.array(["a", "a"]), old_log_probs, sum_pi_squared)
    # row 1 generated nothing: row 0 is alone in its group → B = 0, A = G = [2, 2]
    assert adv.tolist() == [[2.0, 2.0], [0.0, 0.0]]


def test_registry_and_missing_inputs():
    assert get_adv_estimator_fn(AdvantageEstimator.OPTIMAL_TOKEN_BASELINE) is OTB
    assert get_adv_estimator_fn("tir_optimal_token_baseline") is TIR
    with pytest.raises(TypeError, match="sum_pi_squared"):
        OTB(torch.zeros(1, 2), torch.ones(1, 2), np.array(["a"]), old_log_probs=torch.zeros(1, 2))


# ---------------------------------------------------------------------------
# Vectorised ≡ loop reference (verl's per-group formulation, written here)
# ---------------------------------------------------------------------------


def loop_token_baseline(returns, energy, mask, index, members, handle_zero_tail, eps=1e-8):
    """B [B, T]: per group, per column t, Σ G·W·m / (Σ W·m + ε); lone members B = 0; the zero-tail rule."""
    baseline = torch.zeros_like(returns)
    groups = defaultdict(list)
    for i in range(len(index)):
        if members[i]:
            groups[index[i]].append(i)
    for rows in groups.values():
        if len(rows) == 1:
            continue
        for t in range(returns.shape[1]):
            num = sum(float(returns[i, t] * energy[i, t] * mask[i, t]) for i in rows)
            den = sum(float(energy[i, t] * mask[i, t]) for i in rows)
            for i in rows:
                baseline[i, t] = num / (den + eps)
        lengths = sorted(int(mask[i].sum()) for i in rows)
        longest = [i for i in rows if int(mask[i].sum()) == lengths[-1]]
        if handle_zero_tail and len(longest) == 1 and lengths[-1] > lengths[-2]:
            baseline[longest[0], lengths[-2] :] = 0.0
    return baseline


def loop_inputs(rewards, mask, old_log_probs, sum_pi_squared, weights):
    returns = torch.zeros_like(rewards)
    energy = torch.zeros_like(rewards)
    for i in range(rewards.shape[0]):
        running, total = 0.0, 0.0
        for t in reversed(range(rewards.shape[1])):
            running += float(rewards[i, t] * mask[i, t])
            returns[i, t] = running
        for t in range(rewards.shape[1]):
            w = 1 - 2 * math.exp(float(old_log_probs[i, t])) + float(sum_pi_squared[i, t])
            total += w * float(weights[i, t]) ** 2 * float(mask[i, t])
            energy[i, t] = total
    return returns, energy


def loop_otb(rewards, mask, index, old_log_probs, sum_pi_squared, weights, handle_zero_tail):
    returns, energy = loop_inputs(rewards, mask, old_log_probs, sum_pi_squared, weights)
    members = [True] * len(index)
    baseline = loop_token_baseline(returns, energy, mask, index, members, handle_zero_tail)
    return (returns - baseline) * mask


def loop_tir(rewards, mask, index, old_log_probs, sum_pi_squared, weights, handle_zero_tail):
    returns, energy = loop_inputs(rewards, mask, old_log_probs, sum_pi_squared, weights)
    width = int(mask.sum(-1).max())
    packed = [torch.zeros(len(index), width) for _ in range(3)]
    for i in range(len(index)):
        cols = [t for t in range(mask.shape[1]) if mask[i, t] > 0]
        for k, t in enumerate(cols):
            packed[0][i, k], packed[1][i, k], packed[2][i, k] = returns[i, t], energy[i, t], 1.0
    members = [bool(mask[i].sum() > 0) for i in range(len(index))]
    baseline = loop_token_baseline(*packed, index, members, handle_zero_tail)
    advantages = torch.zeros_like(rewards)
    for i in range(len(index)):
        cols = [t for t in range(mask.shape[1]) if mask[i, t] > 0]
        for k, t in enumerate(cols):
            advantages[i, t] = packed[0][i, k] - baseline[i, k]
    return advantages


def random_multi_turn_batch(seed: int, width: int = 8, vocab: int = 6):
    """Random groups (sizes 1..4), masks with observation gaps and empty rows, π and Σπ² from real logits."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 5, (4,), generator=gen).tolist()
    index = np.array([f"u{g}" for g, size in enumerate(sizes) for _ in range(size)], dtype=object)
    index = index[torch.randperm(len(index), generator=gen).numpy()]
    batch = len(index)
    lengths = torch.randint(0, width + 1, (batch,), generator=gen)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    mask = mask * (torch.rand(batch, width, generator=gen) > 0.25).float()  # tool-observation gaps
    rewards = torch.randn(batch, width, generator=gen) * mask
    log_softmax = torch.randn(batch, width, vocab, generator=gen).log_softmax(-1)
    tokens = torch.randint(0, vocab, (batch, width, 1), generator=gen)
    old_log_probs = log_softmax.gather(-1, tokens).squeeze(-1)
    sum_pi_squared = log_softmax.exp().pow(2).sum(-1)
    weights = torch.rand(batch, width, generator=gen) * 2
    return rewards, mask, index, old_log_probs, sum_pi_squared, weights


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("handle_zero_tail", [True, False])
@pytest.mark.parametrize("estimator, reference", [(OTB, loop_otb), (TIR, loop_tir)])
def test_matches_loop_reference(seed, handle_zero_tail, estimator, reference):
    rewards, mask, index, old_log_probs, sum_pi_squared, weights = random_multi_turn_batch(seed)
    adv, ret = estimator(
        rewards,
        mask,
        index,
        old_log_probs,
        sum_pi_squared,
        rollout_is_weights=weights,
        handle_zero_tail=handle_zero_tail,
    )
    expected = reference(rewards, mask, index, old_log_probs, sum_pi_squared, weights, handle_zero_tail)
    torch.testing.assert_close(adv, expected, atol=1e-4, rtol=1e-4)
    assert torch.all(adv[mask == 0] == 0)


def test_sum_pi_squared_from_logits():
    from hybridrl.utils.torch_functional import calculate_sum_pi_squared_from_logits

    # logits (0, ln 3): π = (1/4, 3/4) → Σπ² = 1/16 + 9/16 = 0.625; shifted by 1000 no overflow (exp(2000) would),
    # only float32 rounding of logsumexp ≈ 2000 (ulp 1.2e-4 → 2e-5 here)
    logits = torch.tensor([[0.0, math.log(3.0)], [1000.0, 1000.0 + math.log(3.0)]])
    assert calculate_sum_pi_squared_from_logits(logits).tolist() == pytest.approx([0.625, 0.625], abs=1e-4)
