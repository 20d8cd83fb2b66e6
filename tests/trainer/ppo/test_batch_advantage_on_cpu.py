"""Driver helpers on real DataProtos: response mask, in-reward KL, advantage dispatch, PF-PPO."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from config_testlib import compose_section
from omegaconf import OmegaConf

from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo import core_algos
from hybridrl.trainer.ppo.batch_advantage import (
    apply_kl_penalty,
    compute_advantage,
    compute_pf_ppo_reweight_data,
    compute_response_mask,
    gdpo_reward_metrics,
)
from hybridrl.trainer.ppo.core_algos import AdaptiveKLController, AdvantageEstimator, FixedKLController

ALGO = compose_section("algorithm", gamma=1.0, lam=1.0, pf_ppo={"reweight_method": "pow", "weight_pow": 2.0})


def make_batch(seed: int = 0, groups: int = 3, n: int = 2, prompt_len: int = 3, resp_len: int = 4) -> DataProto:
    """A post-rollout batch: left-padded prompts, right-padded responses, scores on the last valid token."""
    gen = torch.Generator().manual_seed(seed)
    batch = groups * n
    resp_lengths = torch.randint(1, resp_len + 1, (batch,), generator=gen)
    response_mask = (torch.arange(resp_len)[None, :] < resp_lengths[:, None]).long()
    prompt_mask = torch.ones(batch, prompt_len, dtype=torch.long)
    prompt_mask[0, 0] = 0  # one left-padded prompt
    scores = torch.zeros(batch, resp_len)
    scores[torch.arange(batch), resp_lengths - 1] = torch.randint(0, 2, (batch,), generator=gen).float()
    tensors = {
        "responses": torch.randint(0, 50, (batch, resp_len), generator=gen),
        "attention_mask": torch.cat([prompt_mask, response_mask], dim=-1),
        "token_level_scores": scores,
        "old_log_probs": -torch.rand(batch, resp_len, generator=gen),
        "ref_log_prob": -torch.rand(batch, resp_len, generator=gen),
        "values": torch.randn(batch, resp_len, generator=gen),
    }
    uids = np.array([f"p{g}" for g in range(groups) for _ in range(n)], dtype=object)
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids}, meta_info={"global_token_num": [1] * batch})


def test_compute_response_mask_is_the_response_part_of_attention_mask():
    data = make_batch()
    mask = compute_response_mask(data)
    assert mask.shape == data.batch["responses"].shape
    assert torch.equal(mask, data.batch["attention_mask"][:, 3:])


def test_apply_kl_penalty_hand_computed():
    tensors = {
        "response_mask": torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
        "token_level_scores": torch.tensor([[0.0, 1.0], [2.0, 0.0]]),
        "old_log_probs": torch.tensor([[-1.0, -1.0], [-1.0, -5.0]]),
        "ref_log_prob": torch.tensor([[-1.5, -2.0], [-0.5, 0.0]]),
    }
    data = DataProto.from_dict(tensors=tensors)
    ctrl = FixedKLController(kl_coef=0.1)
    data, metrics = apply_kl_penalty(data, ctrl, kl_penalty="kl")
    # kl = (old − ref)·m = [[0.5, 1.0], [−0.5, 0 (masked)]]
    # rewards = scores − 0.1·kl = [[−0.05, 0.9], [2.05, 0]]
    torch.testing.assert_close(data.batch["token_level_rewards"], torch.tensor([[-0.05, 0.9], [2.05, 0.0]]))
    # current_kl = mean(row means) = mean(0.75, −0.5) = 0.125
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.125, abs=1e-6)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.1


def test_apply_kl_penalty_updates_adaptive_controller_after_using_beta():
    data = make_batch()
    data.batch["response_mask"] = compute_response_mask(data)
    ctrl = AdaptiveKLController(init_kl_coef=0.2, target_kl=1e-6, horizon=10)  # KL ≫ target → β grows
    _, metrics = apply_kl_penalty(data, ctrl, kl_penalty="low_var_kl")
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.2  # the β used for the rewards
    # e clipped to 0.2, n_steps = B = 6 → β = 0.2·(1 + 0.2·6/10) = 0.224
    assert ctrl.value == pytest.approx(0.224)


def test_compute_advantage_gae_adds_response_mask_and_matches_core():
    data = make_batch()
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data = compute_advantage(data, AdvantageEstimator.GAE, gamma=0.9, lam=0.95, config=ALGO)
    mask = compute_response_mask(data)
    assert torch.equal(data.batch["response_mask"], mask)
    adv, ret = core_algos.compute_gae_advantage_return(
        data.batch["token_level_rewards"], data.batch["values"], mask, 0.9, 0.95
    )
    torch.testing.assert_close(data.batch["advantages"], adv)
    torch.testing.assert_close(data.batch["returns"], ret)


@pytest.mark.parametrize("norm", [True, False])
def test_compute_advantage_grpo_uses_uid_groups(norm):
    data = make_batch(seed=1)
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data = compute_advantage(data, "grpo", norm_adv_by_std_in_grpo=norm, num_repeat=2, config=ALGO)
    expected, _ = core_algos.compute_grpo_outcome_advantage(
        data.batch["token_level_rewards"],
        data.batch["response_mask"],
        data.non_tensor_batch["uid"],
        norm_adv_by_std_in_grpo=norm,
    )
    torch.testing.assert_close(data.batch["advantages"], expected)


@pytest.mark.parametrize(
    "estimator", ["rloo", "rloo_vectorized", "opo", "gpg", "reinforce_plus_plus_baseline", "grpo_passk"]
)
def test_compute_advantage_registry_estimators(estimator):
    data = make_batch(seed=2)
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data = compute_advantage(data, estimator, config=ALGO)
    expected, _ = core_algos.get_adv_estimator_fn(estimator)(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        config=ALGO,
    )
    torch.testing.assert_close(data.batch["advantages"], expected)


def test_compute_advantage_remax_and_reinforce_pp():
    data = make_batch(seed=3)
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data.batch["reward_baselines"] = torch.full((6,), 0.5)
    data = compute_advantage(data, AdvantageEstimator.REMAX, config=ALGO)
    # remax: A = Σ_{t'≥t} r·m − 0.5·m; at token 0 that is s_i − 0.5
    torch.testing.assert_close(data.batch["advantages"][:, 0], data.batch["token_level_rewards"].sum(-1) - 0.5)
    data = compute_advantage(data, AdvantageEstimator.REINFORCE_PLUS_PLUS, config=ALGO)
    torch.testing.assert_close(
        data.batch["returns"][:, 0], data.batch["token_level_rewards"].sum(-1)
    )  # γ = 1: return at t=0 is the score


def test_compute_advantage_unknown_estimator_lists_valid():
    data = make_batch()
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    with pytest.raises(ValueError, match="Valid estimators"):
        compute_advantage(data, "vtrace", config=ALGO)


def test_pf_ppo_resamples_rows_by_score_weight():
    data = make_batch(seed=4)
    scores = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 3.0])
    data.batch["token_level_scores"] = torch.zeros_like(data.batch["token_level_scores"])
    data.batch["token_level_scores"][:, 0] = scores
    data.meta_info["global_token_num"] = list(range(6))
    torch.manual_seed(0)
    resampled = compute_pf_ppo_reweight_data(data, "pow", 2.0)
    # weights |s|² + 1e-8 → only row 5 (score 3) has non-negligible mass: every draw is row 5
    assert len(resampled) == 6
    assert torch.equal(resampled.batch["token_level_scores"][:, 0], torch.full((6,), 3.0))
    assert resampled.meta_info["global_token_num"] == [5] * 6
    assert list(resampled.non_tensor_batch["uid"]) == ["p2"] * 6
    with pytest.raises(ValueError, match="reweight_method"):
        compute_pf_ppo_reweight_data(data, "softmax", 1.0)


def test_compute_advantage_gae_with_pf_ppo_keeps_batch_size():
    data = make_batch(seed=5)
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    config = OmegaConf.merge(ALGO, {"use_pf_ppo": True, "pf_ppo": {"reweight_method": "max_random"}})
    out = compute_advantage(data, "gae", config=config)
    assert len(out) == len(data) and "advantages" in out.batch.keys()
    assert all(math.isfinite(v) for v in out.batch["advantages"].flatten().tolist())


@pytest.mark.parametrize("norm", [True, False])
def test_compute_advantage_grpo_vectorized_honours_norm_adv_by_std(norm):
    data = make_batch(seed=1)
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    vectorized = compute_advantage(data, "grpo_vectorized", norm_adv_by_std_in_grpo=norm, config=ALGO)
    expected, _ = core_algos.compute_grpo_outcome_advantage(
        data.batch["token_level_rewards"], data.batch["response_mask"], data.non_tensor_batch["uid"], 1e-6, norm
    )
    torch.testing.assert_close(vectorized.batch["advantages"], expected)


def test_compute_advantage_gdpo_reads_the_reward_components_of_the_batch():
    data = make_batch(seed=6)
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    # what a reward manager leaves in the batch for compute_score's {"score", "acc", "fmt"} dicts
    data.non_tensor_batch["acc"] = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    data.non_tensor_batch["fmt"] = np.array([0.5, 1.0, 0.0, 1.0, 1.0, 1.0])
    config = OmegaConf.merge(ALGO, {"gdpo_reward_keys": ["acc", "fmt"], "gdpo_reward_weights": [1.0, 0.5]})
    out = compute_advantage(data, "gdpo", config=config)
    components = torch.tensor([[1.0, 0.5], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 1.0]])
    expected, _ = core_algos.adv.gdpo_outcome_advantage(
        components, out.batch["response_mask"], data.non_tensor_batch["uid"], torch.tensor([1.0, 0.5])
    )
    torch.testing.assert_close(out.batch["advantages"], expected)
    # not the scores: the summed token rewards would give another answer
    fallback, _ = core_algos.compute_gdpo_outcome_advantage(
        data.batch["token_level_rewards"], out.batch["response_mask"], data.non_tensor_batch["uid"]
    )
    assert not torch.allclose(out.batch["advantages"], fallback)
    with pytest.raises(ValueError, match=r"algorithm\.gdpo_reward_keys"):
        compute_advantage(data, "gdpo", config=ALGO)


@pytest.mark.parametrize("estimator", ["optimal_token_baseline", "tir_optimal_token_baseline"])
def test_compute_advantage_token_baseline_inputs(estimator):
    data = make_batch(seed=7)
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    with pytest.raises(ValueError, match=r"\['sum_pi_squared'\].*calculate_sum_pi_squared=True"):
        compute_advantage(data, estimator, config=ALGO)
    gen = torch.Generator().manual_seed(0)
    data.batch["sum_pi_squared"] = torch.rand(6, 4, generator=gen) * 0.5 + 0.5
    out = compute_advantage(data, estimator, config=ALGO)
    args = (data.batch["token_level_rewards"], out.batch["response_mask"], data.non_tensor_batch["uid"])
    inputs = (data.batch["old_log_probs"], data.batch["sum_pi_squared"])
    expected, _ = core_algos.get_adv_estimator_fn(estimator)(*args, *inputs)
    torch.testing.assert_close(out.batch["advantages"], expected)
    # rollout correction's weights, when the batch has them, rescale the energy (ρ²)
    data.batch["rollout_is_weights"] = torch.rand(6, 4, generator=gen) * 2
    weighted = compute_advantage(data, estimator, config=ALGO)
    expected, _ = core_algos.get_adv_estimator_fn(estimator)(*args, *inputs, data.batch["rollout_is_weights"])
    torch.testing.assert_close(weighted.batch["advantages"], expected)


def test_gdpo_reward_metrics_per_component():
    data = make_batch()
    data.non_tensor_batch["acc"] = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    struct = OmegaConf.create({"adv_estimator": "gdpo", "gdpo_reward_keys": ["acc", "absent"]})
    OmegaConf.set_struct(struct, True)
    # acc: mean 4/6, population std sqrt(4/6 · 2/6) = 0.471405; a key the batch lacks gives nothing
    assert gdpo_reward_metrics(data, struct) == pytest.approx(
        {"gdpo/acc/mean": 2 / 3, "gdpo/acc/std": 0.471405, "gdpo/acc/max": 1.0, "gdpo/acc/min": 0.0}, abs=1e-6
    )
    assert gdpo_reward_metrics(data, ALGO) == {}  # another estimator (the shipped section: no gdpo keys)
