"""verl 0.9's group estimators: gdpo, rloo_vectorized, grpo_vectorized (hand-computed values, loop references)."""

from __future__ import annotations

import functools
import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from config_testlib import compose_section
from omegaconf import DictConfig

from hybridrl.trainer.ppo import core_algos
from hybridrl.trainer.ppo.core_algos import AdvantageEstimator, get_adv_estimator_fn

GDPO = core_algos.compute_gdpo_outcome_advantage
GROUPS = np.array(["a", "a", "b", "b"], dtype=object)


@functools.cache
def algorithm_section() -> DictConfig:
    return compose_section("algorithm")


def gdpo_config(keys, weights=None) -> DictConfig:
    """The shipped ``algorithm`` section with ``gdpo_reward_keys`` / ``gdpo_reward_weights`` set."""
    config = algorithm_section().copy()
    config.gdpo_reward_keys = list(keys)
    config.gdpo_reward_weights = None if weights is None else list(weights)
    return config


# ---------------------------------------------------------------------------
# GDPO
# ---------------------------------------------------------------------------


def test_gdpo_hand_computed():
    mask = torch.ones(4, 1)
    components = {"acc": np.array([1.0, 0.0, 1.0, 1.0]), "fmt": np.array([0.0, 1.0, 2.0, 0.0])}
    adv, ret = GDPO(
        torch.zeros(4, 1),
        mask,
        GROUPS,
        config=gdpo_config(["acc", "fmt"], [1.0, 2.0]),
        non_tensor_batch=components,
        batch={},
    )
    # acc: a [1, 0] → μ 0.5, σ sqrt(0.5) = 0.707107 → ±0.707106; b [1, 1] → σ 0 → 0, 0
    # fmt: a [0, 1] → ∓0.707106; b [2, 0] → μ 1, σ sqrt(2) → ±0.707107
    # Σ w_k A_k with w = (1, 2): [0.707 − 1.414, −0.707 + 1.414, 0 + 1.414, 0 − 1.414] = [−0.7071, 0.7071, 1.4142, −1.4142]
    # whiten: μ 0, σ² = (0.5 + 0.5 + 2 + 2)/3 = 5/3, σ = 1.290994 → [−0.547723, 0.547723, 1.095445, −1.095445]
    assert adv[:, 0].tolist() == pytest.approx([-0.547723, 0.547723, 1.095445, -1.095445], abs=1e-5)
    assert torch.equal(adv, ret)


def test_gdpo_differs_from_grpo_on_the_summed_score():
    # the only correct response (acc 1) is the shortest; a large length reward dominates the summed score
    mask = torch.ones(3, 1)
    index = np.array(["a", "a", "a"], dtype=object)
    components = {"acc": np.array([1.0, 0.0, 0.0]), "len": np.array([0.0, 2.0, 10.0])}
    adv, _ = GDPO(
        torch.zeros(3, 1), mask, index, config=gdpo_config(["acc", "len"]), non_tensor_batch=components, batch={}
    )
    # acc: μ 1/3, σ sqrt(1/3) → [1.154699, −0.577349, −0.577349]
    # len: μ 4, σ sqrt(28) = 5.291503 → [−0.755929, −0.377964, 1.133893]
    # sum [0.398770, −0.955314, 0.556544]; whiten (μ ≈ 0, σ = 0.831067) → [0.479822, −1.149487, 0.669665]
    assert adv[:, 0].tolist() == pytest.approx([0.479822, -1.149487, 0.669665], abs=1e-5)
    summed = torch.tensor([[1.0], [2.0], [10.0]])
    grpo, _ = core_algos.compute_grpo_outcome_advantage(summed, mask, index)
    # GRPO on s = [1, 2, 10]: μ 13/3, σ 4.932883 → the correct response gets −0.675737
    assert grpo[0, 0].item() == pytest.approx(-0.675737, abs=1e-5)


def test_gdpo_without_the_batch_uses_the_sequence_score():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [3.0, 0.0], [1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    adv, _ = GDPO(rewards, mask, GROUPS)
    # one component s = [1, 0, 3, 1] → GRPO ±0.707106 (a), ±0.707107 (b); on 6 valid tokens:
    # [0.7071·2, −0.7071·2, 0.7071, −0.7071] → μ 0, σ = sqrt(6·0.5/5) = 0.774597 → ±0.912870
    expected = torch.tensor([[0.912870, 0.912870], [-0.912870, -0.912870], [0.912870, 0.0], [-0.912870, 0.0]])
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=1e-5)


def test_gdpo_errors_name_the_key():
    args = (torch.zeros(2, 1), torch.ones(2, 1), GROUPS[:2])
    with pytest.raises(ValueError, match=r"algorithm\.gdpo_reward_keys"):
        GDPO(*args, config=algorithm_section(), non_tensor_batch={}, batch={})
    with pytest.raises(ValueError, match=r"\['fmt'\].*make compute_score return"):
        GDPO(*args, config=gdpo_config(["acc", "fmt"]), non_tensor_batch={"acc": np.zeros(2)}, batch={})
    with pytest.raises(ValueError, match=r"gdpo_reward_weights has 3 weights for the 1 keys"):
        GDPO(*args, config=gdpo_config(["acc"], [1, 2, 3]), non_tensor_batch={"acc": np.zeros(2)}, batch={})


def loop_gdpo(components, mask, index, weights, eps=1e-6):
    """Per component: GRPO by loop (singleton μ 0, σ 1); weighted sum; whiten over valid tokens (float64)."""
    total = torch.zeros(len(index), dtype=torch.float64)
    for k in range(components.shape[1]):
        groups = defaultdict(list)
        for i in range(len(index)):
            groups[index[i]].append(float(components[i, k]))
        for i in range(len(index)):
            vals = groups[index[i]]
            mu = sum(vals) / len(vals) if len(vals) > 1 else 0.0
            sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 1.0
            total[i] += weights[k] * (float(components[i, k]) - mu) / (sd + eps)
    tokens = total.unsqueeze(-1) * mask.double()
    valid = tokens[mask.bool()]
    return ((tokens - valid.mean()) / torch.sqrt(valid.var() + 1e-8) * mask.double()).float()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gdpo_matches_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 5, (5,), generator=gen).tolist()
    index = np.array([f"u{g}" for g, n in enumerate(sizes) for _ in range(n)], dtype=object)
    batch = len(index)
    mask = (torch.arange(6)[None, :] < torch.randint(1, 7, (batch, 1), generator=gen)).float()
    components = torch.randint(0, 3, (batch, 3), generator=gen).float()
    weights = [1.0, 0.5, 2.0]
    columns = {name: components[:, k].numpy() for k, name in enumerate(("a", "b", "c"))}
    adv, _ = GDPO(
        torch.zeros(batch, 6),
        mask,
        index,
        config=gdpo_config(["a", "b", "c"], weights),
        non_tensor_batch=columns,
        batch={},
    )
    torch.testing.assert_close(adv, loop_gdpo(components, mask, index, weights), atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------
# rloo_vectorized, grpo_vectorized
# ---------------------------------------------------------------------------


def test_rloo_vectorized_hand_computed_lone_response_gets_zero():
    rewards = torch.tensor([[1.0], [0.0], [0.0], [2.0], [4.0], [5.0]])
    mask = torch.ones(6, 1)
    index = np.array(["a", "a", "a", "b", "b", "c"], dtype=object)
    adv, _ = get_adv_estimator_fn("rloo_vectorized")(token_level_rewards=rewards, response_mask=mask, index=index)
    # a: 1 − mean(0, 0) = 1; 0 − mean(1, 0) = −0.5 (twice); b: 2 − 4 = −2, 4 − 2 = 2; c alone: 0 (rloo keeps 5)
    assert adv[:, 0].tolist() == pytest.approx([1.0, -0.5, -0.5, -2.0, 2.0, 0.0], abs=1e-6)
    rloo, _ = core_algos.compute_rloo_outcome_advantage(rewards, mask, index)
    assert rloo[5, 0].item() == 5.0 and torch.equal(rloo[:5], adv[:5])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rloo_vectorized_matches_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    index = np.array([f"u{int(g)}" for g in torch.randint(0, 5, (14,), generator=gen)], dtype=object)
    rewards = torch.randn(14, 3, generator=gen)
    mask = (torch.rand(14, 3, generator=gen) > 0.3).float()
    scores = (rewards).sum(-1)
    expected = torch.zeros(14, 3)
    for i in range(14):
        others = [float(scores[j]) for j in range(14) if index[j] == index[i] and j != i]
        expected[i] = (float(scores[i]) - sum(others) / len(others) if others else 0.0) * mask[i]
    adv, _ = core_algos.compute_rloo_vectorized_outcome_advantage(rewards, mask, index)
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=1e-5)


def test_grpo_vectorized_is_grpo():
    assert get_adv_estimator_fn(AdvantageEstimator.GRPO_VECTORIZED) is core_algos.compute_grpo_outcome_advantage
    assert core_algos.compute_grpo_vectorized_outcome_advantage is core_algos.compute_grpo_outcome_advantage
