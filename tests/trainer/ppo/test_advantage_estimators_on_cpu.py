"""Advantage estimators: hand-computed values, loop references, properties, registry errors."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from config_testlib import compose_section

from hybridrl.trainer.ppo import core_algos
from hybridrl.trainer.ppo.core_algos import AdvantageEstimator, get_adv_estimator_fn

ATOL = 1e-5


def outcome_rewards(scores: list[float], lengths: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rewards with each score on the last valid token, and the matching response mask."""
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for i, (score, length) in enumerate(zip(scores, lengths)):
        mask[i, :length] = 1
        rewards[i, length - 1] = score
    return rewards, mask


# ---------------------------------------------------------------------------
# Loop references (verl's per-sample formulation), used only here
# ---------------------------------------------------------------------------


def loop_group_stats(scores: torch.Tensor, index: np.ndarray) -> tuple[dict, dict, dict]:
    groups: dict = defaultdict(list)
    for i in range(len(scores)):
        groups[index[i]].append(float(scores[i]))
    mean, std = {}, {}
    for uid, vals in groups.items():
        if len(vals) == 1:
            mean[uid], std[uid] = 0.0, 1.0
        else:
            mu = sum(vals) / len(vals)
            mean[uid] = mu
            std[uid] = math.sqrt(sum((v - mu) ** 2 for v in vals) / (len(vals) - 1))
    return groups, mean, std


def loop_grpo(rewards, mask, index, norm=True, eps=1e-6):
    scores = rewards.sum(-1)
    _, mean, std = loop_group_stats(scores, index)
    out = torch.zeros_like(rewards)
    for i in range(len(scores)):
        a = float(scores[i]) - mean[index[i]]
        out[i] = (a / (std[index[i]] + eps) if norm else a) * mask[i]
    return out


def loop_rloo(rewards, mask, index):
    scores = rewards.sum(-1)
    groups, _, _ = loop_group_stats(scores, index)
    out = torch.zeros_like(rewards)
    for i in range(len(scores)):
        vals, s = groups[index[i]], float(scores[i])
        a = s - (sum(vals) - s) / (len(vals) - 1) if len(vals) > 1 else s
        out[i] = a * mask[i]
    return out


def loop_opo(rewards, mask, index):
    scores, lengths = rewards.sum(-1), mask.sum(-1)
    num, den, count = defaultdict(float), defaultdict(float), defaultdict(int)
    for i in range(len(scores)):
        num[index[i]] += float(lengths[i] * scores[i])
        den[index[i]] += float(lengths[i])
        count[index[i]] += 1
    out = torch.zeros_like(rewards)
    for i in range(len(scores)):
        baseline = num[index[i]] / den[index[i]] if count[index[i]] > 1 else 0.0
        out[i] = (float(scores[i]) - baseline) * mask[i]
    return out


def loop_gpg(rewards, mask, index):
    scores = rewards.sum(-1)
    _, mean, _ = loop_group_stats(scores, index)
    alpha = len(scores) / max(sum(1 for s in scores if float(s) != 0.0), 1)
    out = torch.zeros_like(rewards)
    for i in range(len(scores)):
        out[i] = alpha * (float(scores[i]) - mean[index[i]]) * mask[i]
    return out


def loop_passk(rewards, mask, index, norm=True, eps=1e-6):
    scores = rewards.sum(-1)
    groups, _, std = loop_group_stats(scores, index)
    members: dict = defaultdict(list)
    for i in range(len(scores)):
        members[index[i]].append(i)
    out = torch.zeros_like(rewards)
    for uid, rows in members.items():
        ordered = sorted(rows, key=lambda r: (-float(scores[r]), r))
        gap = float(scores[ordered[0]] - scores[ordered[1]])
        out[ordered[0]] = (gap / (std[uid] + eps) if norm else gap) * mask[ordered[0]]
    return out


def loop_whiten(values, mask):
    valid = values[mask.bool()].double()
    mean, var = valid.mean(), valid.var(unbiased=True)
    return ((values.double() - mean) / torch.sqrt(var + 1e-8)).float()


def loop_gae(rewards, values, mask, gamma, lam):
    batch, width = rewards.shape
    adv = torch.zeros_like(rewards)
    for i in range(batch):
        next_value, last = 0.0, 0.0
        for t in reversed(range(width)):
            delta = float(rewards[i, t]) + gamma * next_value - float(values[i, t])
            if mask[i, t] > 0:
                next_value, last = float(values[i, t]), delta + gamma * lam * last
            adv[i, t] = last
    return loop_whiten(adv, mask), adv + values


def loop_reinforce_pp(rewards, mask, gamma):
    """verl 0.9: the return runs over the generated tokens only; masked tokens get 0 and are stepped over."""
    batch, width = rewards.shape
    returns = torch.zeros_like(rewards)
    for i in range(batch):
        running = 0.0
        for t in reversed(range(width)):
            if mask[i, t] > 0:
                running = float(rewards[i, t]) + gamma * running
                returns[i, t] = running
    return loop_whiten(returns, mask) * mask, returns


def random_batch(seed: int, num_groups: int = 7, width: int = 9):
    """Random group sizes (1..5, so singletons occur), random lengths (≥1), random rewards incl. zeros."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 6, (num_groups,), generator=gen).tolist()
    index = np.array([f"uid-{g}" for g, size in enumerate(sizes) for _ in range(size)], dtype=object)
    perm = torch.randperm(len(index), generator=gen).numpy()
    index = index[perm]  # groups interleaved, as after balance_batch
    batch = len(index)
    lengths = torch.randint(1, width + 1, (batch,), generator=gen)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    rewards = torch.randn(batch, width, generator=gen) * mask
    rewards[torch.rand(batch, generator=gen) < 0.2] = 0.0  # some all-zero rows (GPG's nonzero count)
    values = torch.randn(batch, width, generator=gen)
    return rewards, values, mask, index


# ---------------------------------------------------------------------------
# Hand-computed values
# ---------------------------------------------------------------------------

# groups: a = [1, 0, 0], b = [2, 4], c = [5] (singleton)
SCORES = [1.0, 0.0, 0.0, 2.0, 4.0, 5.0]
LENGTHS = [2, 4, 1, 3, 2, 4]
INDEX = np.array(["a", "a", "a", "b", "b", "c"], dtype=object)


def first_token(adv: torch.Tensor) -> list[float]:
    return adv[:, 0].tolist()


def test_grpo_hand_computed():
    rewards, mask = outcome_rewards(SCORES, LENGTHS, 4)
    adv, ret = core_algos.compute_grpo_outcome_advantage(rewards, mask, INDEX)
    # a: μ = 1/3, σ = sqrt(((2/3)² + 2·(1/3)²)/2) = sqrt(1/3) = 0.57735
    #    → (2/3)/0.57735 = 1.15470, (−1/3)/0.57735 = −0.57735
    # b: μ = 3, σ = sqrt((1 + 1)/1) = 1.41421 → ∓0.70711
    # c: singleton μ = 0, σ = 1 → 5/(1 + 1e-6) = 4.999995
    expected = [1.15470, -0.57735, -0.57735, -0.70711, 0.70711, 4.999995]
    assert first_token(adv) == pytest.approx(expected, abs=ATOL)
    assert torch.equal(adv, ret)
    assert torch.all(adv[mask == 0] == 0)


def test_dr_grpo_hand_computed():
    rewards, mask = outcome_rewards(SCORES, LENGTHS, 4)
    adv, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, INDEX, norm_adv_by_std_in_grpo=False)
    # s − μ: a → 2/3, −1/3, −1/3; b → −1, 1; c → 5 − 0
    assert first_token(adv) == pytest.approx([2 / 3, -1 / 3, -1 / 3, -1.0, 1.0, 5.0], abs=ATOL)


def test_grpo_equal_scores_give_zero_not_nan():
    rewards, mask = outcome_rewards([1.0, 1.0, 1.0], [2, 2, 2], 2)
    adv, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, np.array(["u"] * 3, dtype=object))
    # σ = 0 → (1 − 1)/(0 + 1e-6) = 0
    assert torch.equal(adv, torch.zeros_like(adv))


def test_grpo_passk_hand_computed():
    rewards, mask = outcome_rewards([1.0, 0.0, 0.5, 3.0, 3.0], [1, 2, 1, 2, 1], 2)
    index = np.array(["a", "a", "a", "b", "b"], dtype=object)
    adv, _ = core_algos.compute_grpo_passk_outcome_advantage(
        rewards, mask, index, config={"norm_adv_by_std_in_grpo": False}
    )
    # a: r_max − r_2nd = 1 − 0.5 = 0.5 on the best only; b: tie 3 − 3 = 0
    assert first_token(adv) == pytest.approx([0.5, 0, 0, 0, 0], abs=ATOL)
    adv, _ = core_algos.compute_grpo_passk_outcome_advantage(rewards, mask, index)
    # σ_a = sqrt((0.5² + 0.5² + 0²)/2) = 0.5 → 0.5/(0.5 + 1e-6) ≈ 1.0
    assert first_token(adv) == pytest.approx([1.0, 0, 0, 0, 0], abs=ATOL)


def test_grpo_passk_rejects_singletons():
    rewards, mask = outcome_rewards([1.0, 0.0, 2.0], [1, 1, 1], 1)
    with pytest.raises(ValueError, match="at least 2"):
        core_algos.compute_grpo_passk_outcome_advantage(rewards, mask, np.array(["a", "a", "b"], dtype=object))


def test_rloo_hand_computed():
    rewards, mask = outcome_rewards(SCORES, LENGTHS, 4)
    adv, _ = core_algos.compute_rloo_outcome_advantage(rewards, mask, INDEX)
    # a: 1 − mean(0, 0) = 1; 0 − mean(1, 0) = −0.5 (twice); b: 2 − 4 = −2, 4 − 2 = 2; c: singleton keeps 5
    assert first_token(adv) == pytest.approx([1.0, -0.5, -0.5, -2.0, 2.0, 5.0], abs=ATOL)


def test_opo_hand_computed():
    rewards, mask = outcome_rewards(SCORES, LENGTHS, 4)
    adv, _ = core_algos.compute_opo_outcome_advantage(rewards, mask, INDEX)
    # a: baseline (2·1 + 4·0 + 1·0)/(2 + 4 + 1) = 2/7 → 5/7, −2/7, −2/7
    # b: baseline (3·2 + 2·4)/(3 + 2) = 14/5 = 2.8 → −0.8, 1.2; c: singleton baseline 0 → 5
    assert first_token(adv) == pytest.approx([5 / 7, -2 / 7, -2 / 7, -0.8, 1.2, 5.0], abs=ATOL)


def test_gpg_hand_computed():
    rewards, mask = outcome_rewards(SCORES, LENGTHS, 4)
    adv, _ = core_algos.compute_gpg_outcome_advantage(rewards, mask, INDEX)
    # α = B / #nonzero = 6 / 4 = 1.5; a: 1.5·(2/3) = 1, 1.5·(−1/3) = −0.5; b: ∓1.5; c: 1.5·5 = 7.5
    assert first_token(adv) == pytest.approx([1.0, -0.5, -0.5, -1.5, 1.5, 7.5], abs=ATOL)


def test_reinforce_plus_plus_baseline_hand_computed():
    rewards, mask = outcome_rewards([1.0, 0.0, 2.0], [2, 2, 2], 2)
    index = np.array(["a", "a", "b"], dtype=object)
    adv, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, index)
    # centred: a → 0.5, −0.5; b (singleton) → 2; tiled over 2 tokens → 6 values
    # μ = (1 − 1 + 4)/6 = 2/3; σ² = 2·((−1/6)² + (−7/6)² + (4/3)²)/5 = 1.266667, σ = 1.125463
    # → (0.5 − 2/3)/σ = −0.148087, (−0.5 − 2/3)/σ = −1.036608, (2 − 2/3)/σ = 1.184695
    assert first_token(adv) == pytest.approx([-0.148087, -1.036608, 1.184695], abs=ATOL)
    assert torch.equal(adv[:, 0], adv[:, 1])


def test_gae_hand_computed():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 0.4, 0.6]])
    mask = torch.ones(1, 3)
    adv, ret = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma=0.5, lam=0.5)
    # t=2: δ = 1 + 0.5·0 − 0.6 = 0.4,            A = 0.4
    # t=1: δ = 0 + 0.5·0.6 − 0.4 = −0.1,         A = −0.1 + 0.25·0.4 = 0.0
    # t=0: δ = 0 + 0.5·0.4 − 0.2 = 0.0,          A = 0.0 + 0.25·0.0 = 0.0
    # returns = A + V = [0.2, 0.4, 1.0]; whiten([0, 0, 0.4]): μ = 0.13333, σ = sqrt(0.10667/2) = 0.23094
    assert ret[0].tolist() == pytest.approx([0.2, 0.4, 1.0], abs=ATOL)
    assert adv[0].tolist() == pytest.approx([-0.57735, -0.57735, 1.15470], abs=1e-4)


def test_gae_skips_masked_tokens():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 9.0, 0.6]])  # V at the masked token must be ignored
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    adv, ret = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma=0.5, lam=0.5)
    # t=2: A = 0.4 (as above), carried V_next = 0.6
    # t=1: masked → A and V_next carried unchanged (A = 0.4)
    # t=0: δ = 0 + 0.5·0.6 − 0.2 = 0.1, A = 0.1 + 0.25·0.4 = 0.2
    # returns = A + V = [0.4, 9.4, 1.0]; whiten over valid [0.2, 0.4]: μ = 0.3, σ = sqrt(0.02) = 0.141421
    assert ret[0].tolist() == pytest.approx([0.4, 9.4, 1.0], abs=ATOL)
    assert adv[0, [0, 2]].tolist() == pytest.approx([-0.707107, 0.707107], abs=1e-4)


def test_reinforce_plus_plus_hand_computed():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    mask = torch.ones(1, 3)
    adv, ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config={"gamma": 0.5})
    # G = [0.5²·1, 0.5·1, 1] = [0.25, 0.5, 1]; μ = 0.58333, σ = sqrt(0.291667/2) = 0.381881
    assert ret[0].tolist() == pytest.approx([0.25, 0.5, 1.0], abs=ATOL)
    assert adv[0].tolist() == pytest.approx([-0.872872, -0.218218, 1.091089], abs=1e-4)


def test_reinforce_plus_plus_ignores_rewards_after_eos():
    rewards = torch.tensor([[0.0, 1.0, 5.0]])  # 5 sits after EOS
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    _, ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config={"gamma": 0.5})
    # t=2 masked: return 0, the carried return stays 0; t=1: G = 1; t=0: G = 0 + 0.5·1 = 0.5 → the 5 is dropped
    assert ret[0].tolist() == pytest.approx([0.5, 1.0, 0.0], abs=ATOL)


def test_reinforce_plus_plus_carries_the_return_across_tool_observations():
    # two assistant turns around a 2-token tool observation; outcome reward 1 on the last generated token
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 1.0]])
    adv, ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config={"gamma": 0.5})
    # t=5: G = 1; t=4: 0.5·1 = 0.5; t=3, t=2 (observation): G = 0, carried 0.5 undiscounted;
    # t=1: 0.5·0.5 = 0.25; t=0: 0.125. (verl 0.5 reset at the observation: the first turn got 0, 0.)
    assert ret[0].tolist() == pytest.approx([0.125, 0.25, 0.0, 0.0, 0.5, 1.0], abs=ATOL)
    # whiten over [0.125, 0.25, 0.5, 1]: μ = 0.46875, σ = sqrt(0.449219/3) = 0.386963
    # → −0.34375/σ = −0.888330, −0.21875/σ = −0.565301, 0.03125/σ = 0.080757, 0.53125/σ = 1.372874
    assert adv[0].tolist() == pytest.approx([-0.888330, -0.565301, 0.0, 0.0, 0.080757, 1.372874], abs=1e-4)


def test_reinforce_plus_plus_baseline_gives_every_turn_the_outcome():
    # the baseline variant broadcasts one centred score over the generated tokens of both turns
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0]])
    adv, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, np.array(["u", "u"]))
    # centred scores ±0.5 on 3 generated tokens each: μ = 0, σ = sqrt(6·0.25/5) = 0.547723 → ±0.912871
    expected = [[0.912871, 0.0, 0.912871, 0.912871], [-0.912871, 0.0, -0.912871, -0.912871]]
    assert adv.tolist() == [pytest.approx(row, abs=1e-5) for row in expected]


def test_remax_hand_computed():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    baselines = torch.tensor([0.4, 0.4])
    adv, ret = core_algos.compute_remax_outcome_advantage(rewards, baselines, mask)
    # returns = reverse cumsum(r·m): [1, 1, 1] and [1, 1, 0]; A = G − b·m
    assert ret.tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    torch.testing.assert_close(adv, torch.tensor([[0.6, 0.6, 0.6], [0.6, 0.6, 0.0]]))


# ---------------------------------------------------------------------------
# Vectorised ≡ loop reference on random batches (random group sizes, masks, interleaved uids)
# ---------------------------------------------------------------------------

SEEDS = [0, 1, 2, 3, 4]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_matches_loop(seed, norm):
    rewards, _, mask, index = random_batch(seed)
    adv, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    torch.testing.assert_close(adv, loop_grpo(rewards, mask, index, norm), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    "estimator, reference",
    [
        (core_algos.compute_rloo_outcome_advantage, loop_rloo),
        (core_algos.compute_opo_outcome_advantage, loop_opo),
        (core_algos.compute_gpg_outcome_advantage, loop_gpg),
    ],
)
def test_group_estimators_match_loop(seed, estimator, reference):
    rewards, _, mask, index = random_batch(seed)
    adv, ret = estimator(rewards, mask, index)
    torch.testing.assert_close(adv, reference(rewards, mask, index), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ret, adv)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_passk_matches_loop(seed, norm):
    rewards, _, mask, index = random_batch(seed)
    # pass@k needs ≥ 2 per group: duplicate every row under the same uid
    rewards, mask, index = (
        torch.cat([rewards, rewards.flip(0)]),
        torch.cat([mask, mask.flip(0)]),
        np.concatenate([index, index[::-1]]),
    )
    adv, _ = core_algos.compute_grpo_passk_outcome_advantage(
        rewards, mask, index, config=compose_section("algorithm", norm_adv_by_std_in_grpo=norm)
    )
    torch.testing.assert_close(adv, loop_passk(rewards, mask, index, norm), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_reinforce_pp_baseline_matches_loop(seed):
    rewards, _, mask, index = random_batch(seed)
    scores_adv = loop_grpo(rewards, mask, index, norm=False)  # s − μ_g, broadcast over valid tokens
    expected = loop_whiten(scores_adv, mask) * mask
    adv, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, index)
    torch.testing.assert_close(adv, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_matches_loop(seed):
    rewards, values, mask, _ = random_batch(seed)
    mask[:, 2] = 0  # interior masked token in every row (observation tokens)
    mask[:, 0] = 1
    adv, ret = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma=0.9, lam=0.8)
    ref_adv, ref_ret = loop_gae(rewards, values, mask, gamma=0.9, lam=0.8)
    torch.testing.assert_close(ret, ref_ret, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(adv * mask, ref_adv * mask, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("seed", SEEDS)
def test_reinforce_pp_matches_loop(seed):
    rewards, _, mask, _ = random_batch(seed)
    mask[:, 2] = 0  # an observation token inside every response
    mask[:, 0] = 1
    adv, ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config={"gamma": 0.7})
    ref_adv, ref_ret = loop_reinforce_pp(rewards, mask, gamma=0.7)
    torch.testing.assert_close(ret, ref_ret, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(adv, ref_adv, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_grpo_zero_mean_per_group(seed):
    rewards, _, mask, index = random_batch(seed)
    for norm in (True, False):
        adv, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
        per_seq = adv.gather(1, torch.zeros(len(index), 1, dtype=torch.long)).squeeze(1)  # token 0 is always valid
        for uid in set(index):
            rows = torch.as_tensor(index == uid)
            if rows.sum() > 1:
                assert abs(float(per_seq[rows].mean())) < 1e-5


@pytest.mark.parametrize("seed", SEEDS)
def test_rloo_zero_mean_per_group(seed):
    rewards, _, mask, index = random_batch(seed)
    adv, _ = core_algos.compute_rloo_outcome_advantage(rewards, mask, index)
    for uid in set(index):
        rows = torch.as_tensor(index == uid)
        if rows.sum() > 1:
            # Σ_i (s_i − mean_{j≠i} s_j) = n·μ − n·μ = 0
            assert abs(float(adv[rows, 0].mean())) < 1e-4


def test_group_estimators_ignore_uid_type_and_order():
    rewards, _, mask, index = random_batch(7)
    as_ints = np.unique(index, return_inverse=True)[1]
    for name in ("grpo", "rloo", "opo", "gpg", "reinforce_plus_plus_baseline"):
        fn = get_adv_estimator_fn(name)
        by_str, _ = fn(token_level_rewards=rewards, response_mask=mask, index=index, config=None)
        by_int, _ = fn(token_level_rewards=rewards, response_mask=mask, index=as_ints, config=None)
        by_tensor, _ = fn(token_level_rewards=rewards, response_mask=mask, index=torch.as_tensor(as_ints), config=None)
        torch.testing.assert_close(by_str, by_int)
        torch.testing.assert_close(by_str, by_tensor)


@pytest.mark.parametrize("seed", SEEDS)
def test_masked_positions_never_leak(seed):
    rewards, values, mask, index = random_batch(seed)
    noise = torch.randn(rewards.shape, generator=torch.Generator().manual_seed(seed + 100)) * 5
    outside = 1 - mask
    gae = core_algos.compute_gae_advantage_return(rewards, values, mask, 0.9, 0.8)
    gae_p = core_algos.compute_gae_advantage_return(rewards + noise * outside, values + noise * outside, mask, 0.9, 0.8)
    torch.testing.assert_close(gae[0] * mask, gae_p[0] * mask)
    torch.testing.assert_close(gae[1] * mask, gae_p[1] * mask)
    rpp = core_algos.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config={"gamma": 0.9})
    rpp_p = core_algos.compute_reinforce_plus_plus_outcome_advantage(
        rewards + noise * outside, mask, config={"gamma": 0.9}
    )
    torch.testing.assert_close(rpp[0], rpp_p[0])
    torch.testing.assert_close(rpp[1] * mask, rpp_p[1] * mask)
    baselines = torch.randn(len(index))
    remax = core_algos.compute_remax_outcome_advantage(rewards, baselines, mask)
    remax_p = core_algos.compute_remax_outcome_advantage(rewards + noise * outside, baselines, mask)
    torch.testing.assert_close(remax[0], remax_p[0])
    for name in ("grpo", "rloo", "opo", "gpg", "reinforce_plus_plus_baseline"):
        adv, _ = get_adv_estimator_fn(name)(token_level_rewards=rewards, response_mask=mask, index=index)
        assert torch.all(adv[mask == 0] == 0), name


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------


def test_enum_values_are_verls_strings_and_all_registered():
    # verl 0.9's AdvantageEstimator, in its order
    assert [e.value for e in AdvantageEstimator] == [
        "gae",
        "grpo",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "remax",
        "rloo",
        "opo",
        "grpo_passk",
        "gpg",
        "rloo_vectorized",
        "grpo_vectorized",
        "optimal_token_baseline",
        "tir_optimal_token_baseline",
        "gdpo",
    ]
    for member in AdvantageEstimator:
        assert get_adv_estimator_fn(member) is core_algos.ADV_ESTIMATOR_REGISTRY[member.value]
        assert get_adv_estimator_fn(member.value) is get_adv_estimator_fn(member)


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(ValueError) as err:
        get_adv_estimator_fn("grpo_typo")
    message = str(err.value)
    assert "grpo_typo" in message
    for name in ("gae", "grpo", "rloo", "remax", "opo", "gpg", "grpo_passk"):
        assert f"'{name}'" in message


def test_register_custom_estimator_and_reject_conflicts():
    @core_algos.register_adv_est("test_constant_one")
    def constant(token_level_rewards, response_mask, **kwargs):
        return response_mask.clone(), response_mask.clone()

    try:
        assert get_adv_estimator_fn("test_constant_one") is constant
        core_algos.register_adv_est("test_constant_one")(constant)  # same function: allowed
        with pytest.raises(ValueError, match="already registered"):
            core_algos.register_adv_est("test_constant_one")(lambda **kw: kw)
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop("test_constant_one")
