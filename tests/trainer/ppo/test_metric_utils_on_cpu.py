"""Step metrics and validation metrics on real DataProtos, hand-computed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo.metric_utils import (
    bootstrap_metric,
    calc_maj_val,
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    process_validation_metrics,
)


def step_batch() -> DataProto:
    """2 responses; P = 3, R = 4. Prompt lengths [3, 2]; response lengths [4, 2]."""
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 0, 0]])
    response_mask = attention_mask[:, 3:].float()
    tensors = {
        "responses": torch.zeros(2, 4, dtype=torch.long),
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "token_level_scores": torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 3.0, 0.0, 0.0]]),
        "token_level_rewards": torch.tensor([[0.0, 0.0, -0.5, 1.0], [0.0, 3.0, 0.0, 0.0]]),
        "advantages": torch.tensor([[1.0, 2.0, 3.0, 4.0], [-1.0, -2.0, 99.0, 99.0]]),
        "returns": torch.tensor([[1.0, 1.0, 1.0, 1.0], [2.0, 4.0, 99.0, 99.0]]),
        "values": torch.tensor([[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 0.0, 0.0]]),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"global_token_num": [7, 4]})


def test_compute_data_metrics_hand_computed():
    m = compute_data_metrics(step_batch(), use_critic=True)
    # scores (sums) [1, 3]; rewards [0.5, 3]
    assert (m["critic/score/mean"], m["critic/score/max"], m["critic/score/min"]) == (2.0, 3.0, 1.0)
    assert (m["critic/rewards/mean"], m["critic/rewards/max"], m["critic/rewards/min"]) == (1.75, 3.0, 0.5)
    # valid advantages [1, 2, 3, 4, −1, −2] (the 99s are masked): mean 7/6
    assert m["critic/advantages/mean"] == pytest.approx(7 / 6)
    assert (m["critic/advantages/max"], m["critic/advantages/min"]) == (4.0, -2.0)
    # valid returns [1, 1, 1, 1, 2, 4], values [1, 1, 1, 1, 2, 2] → R − V = [0, 0, 0, 0, 0, 2]
    # Var(R − V) = (5·(1/3)² + (5/3)²)/5 = 2/3; Var(R) = mean 5/3 → (4·(2/3)² + (1/3)² + (7/3)²)/5 = 22/15
    # explained = 1 − (2/3)/(22/15 + 1e-5) = 0.545458
    assert m["critic/vf_explained_var"] == pytest.approx(1 - (2 / 3) / (22 / 15 + 1e-5), abs=1e-6)
    assert m["critic/values/max"] == 2.0
    # response lengths [4, 2], R = 4 → clip ratio 1/2; prompt lengths [3, 2], P = 3 → clip ratio 1/2
    assert (m["response_length/mean"], m["response_length/max"], m["response_length/min"]) == (3.0, 4.0, 2.0)
    assert m["response_length/clip_ratio"] == 0.5 and m["prompt_length/clip_ratio"] == 0.5
    assert m["prompt_length/mean"] == 2.5
    assert m["response/aborted_ratio"] == 0.0 and m["response_length_non_aborted/mean"] == 3.0


def test_compute_data_metrics_without_critic_and_with_turns():
    batch = step_batch()
    batch.non_tensor_batch["__num_turns__"] = np.array([1, 3])
    m = compute_data_metrics(batch, use_critic=False)
    assert not any(key.startswith("critic/values") for key in m) and "critic/vf_explained_var" not in m
    assert (m["num_turns/min"], m["num_turns/max"], m["num_turns/mean"]) == (1, 3, 2)


def test_compute_timing_metrics_hand_computed():
    timing = {"gen": 0.6, "update_actor": 1.3, "step": 3.0, "testing": 1.0}
    m = compute_timing_metrics(step_batch(), timing)
    assert m["timing_s/step"] == 3.0 and m["timing_s/testing"] == 1.0
    # gen per response token: 0.6 s · 1000 / 6 tokens = 100 ms; update_actor per all 11 tokens = 118.18 ms
    assert m["timing_per_token_ms/gen"] == pytest.approx(100.0)
    assert m["timing_per_token_ms/update_actor"] == pytest.approx(1300 / 11)
    assert "timing_per_token_ms/step" not in m


def test_compute_throughout_metrics_hand_computed():
    m = compute_throughout_metrics(step_batch(), {"step": 2.0}, n_gpus=4)
    # 11 tokens / (2 s · 4 devices) = 1.375
    assert m == {"perf/total_num_tokens": 11, "perf/time_per_step": 2.0, "perf/throughput": 1.375}


def test_bootstrap_matches_verls_global_seed_stream_and_leaves_global_rng_alone():
    data = [0.0, 1.0, 1.0, 0.0, 1.0]
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    result = bootstrap_metric(data, 3, [np.max, np.min], n_bootstrap=50, seed=7)
    assert np.array_equal(np.random.get_state()[1], before)
    # reference: verl's loop over np.random.seed(seed) + np.random.choice
    np.random.seed(7)
    maxes, mins = [], []
    for _ in range(50):
        sample = [data[i] for i in np.random.choice(len(data), size=3, replace=True)]
        maxes.append(np.max(sample))
        mins.append(np.min(sample))
    assert result == [(np.mean(maxes), np.std(maxes)), (np.mean(mins), np.std(mins))]


def test_calc_maj_val():
    votes = [{"pred": "A", "val": 0.9}, {"pred": "B", "val": 0.8}, {"pred": "A", "val": 0.7}]
    assert calc_maj_val(votes, vote_key="pred", val_key="val") == 0.9  # majority A, first A's value


def test_process_validation_metrics():
    sources = ["gsm8k"] * 4 + ["math"]
    prompts = ["q1", "q1", "q2", "q2", "q3"]
    infos = {"reward": [1.0, 0.0, 1.0, 1.0, 0.5], "pred": ["4", "5", "7", "7", "x"]}
    out = process_validation_metrics(sources, prompts, infos, seed=42)
    gsm = out["gsm8k"]["reward"]
    # mean@2 per prompt: q1 0.5, q2 1.0 → 0.75; std@2: q1 0.5, q2 0 → 0.25
    assert gsm["mean@2"] == 0.75 and gsm["std@2"] == 0.25
    # q2 is constant → best/worst/maj all 1; q1 from the bootstrap (4 equally likely pairs)
    q1_best = bootstrap_metric([1.0, 0.0], 2, [np.max], seed=42)[0][0]
    assert gsm["best@2/mean"] == pytest.approx((q1_best + 1.0) / 2)
    assert {"worst@2/mean", "worst@2/std", "maj@2/mean", "maj@2/std", "best@2/std"} <= gsm.keys()
    assert "pred" not in out["gsm8k"]  # string variables are not scored
    assert out["math"]["reward"] == {"mean@1": 0.5}  # a single response: only mean@1


def variance_batch(with_is_weights: bool) -> DataProto:
    """2 trajectories, R = 2. Row 0: π(y) = 0.5, 0.25 and Σπ² = 0.5, 0.25 (W per token 0.5, 0.75; A = 1).
    Row 1: π(y) = 0.5 and Σπ² = 0.5 on its one response token (W 0.5; A = -2; the masked token is ignored)."""
    tensors = {
        "old_log_probs": torch.tensor([[0.5, 0.25], [0.5, 0.9]]).log(),
        "sum_pi_squared": torch.tensor([[0.5, 0.25], [0.5, 0.3]]),
        "advantages": torch.tensor([[1.0, 1.0], [-2.0, 5.0]]),
        "response_mask": torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
    }
    if with_is_weights:  # ρ = 2, 1 on row 0; ρ = 0 (rejected) on row 1's token
        tensors["rollout_is_weights"] = torch.tensor([[2.0, 1.0], [0.0, 1.0]])
    return DataProto.from_dict(tensors)


def test_variance_proxies_on_policy_hand_computed():
    from hybridrl.trainer.ppo.metric_utils import compute_variance_proxy_metrics

    metrics = compute_variance_proxy_metrics(variance_batch(with_is_weights=False), gradient_norm=0.5)
    # W = 1.25 and 0.5; A = 1 and -2: E[A²W] = (1.25 + 4 · 0.5) / 2; ‖ḡ‖² = 0.25; noise (1.625 - 0.25) / (2 - 1)
    assert metrics == pytest.approx({
        "variance_proxy/proxy1_signal_strength": 0.25,
        "variance_proxy/proxy2_total_power": 1.625,
        "variance_proxy/proxy3_pure_noise": 1.375,
        "variance_proxy/expected_a_squared": 2.5,
        "variance_proxy/expected_w": 0.875,
    })


def test_variance_proxies_with_rollout_is_weights_hand_computed():
    from hybridrl.trainer.ppo.metric_utils import compute_variance_proxy_metrics

    metrics = compute_variance_proxy_metrics(variance_batch(with_is_weights=True))
    # scaled W: row 0 0.5·4 + 0.75·1 = 2.75, row 1 0.5·0 = 0 → E[W] = 1.375. Unscaled (verl divides by ρ² clamped
    # at 1e-10, so the rejected token stays out): 1.25 and 0; ρ̄ = 1.5 and 0 → E[ρ̄²A²W] = (2.25 · 1 · 1.25) / 2.
    assert metrics["variance_proxy/proxy2_total_power"] == pytest.approx(1.40625)
    assert metrics["variance_proxy/expected_w"] == pytest.approx(1.375)
    assert metrics["variance_proxy/proxy1_signal_strength"] == 0.0 and metrics["variance_proxy/proxy3_pure_noise"] == 0.0


def test_variance_proxies_clamp_negative_w_and_need_sum_pi_squared():
    from hybridrl.trainer.ppo.metric_utils import compute_variance_proxy_metrics

    batch = variance_batch(with_is_weights=False)
    batch.batch["old_log_probs"] = torch.tensor([[0.9, 0.9], [0.5, 0.5]]).log()  # row 0: W = 2 (1 - 1.8) + 0.75 < 0
    metrics = compute_variance_proxy_metrics(batch, gradient_norm=10.0)
    assert metrics["variance_proxy/proxy2_total_power"] == pytest.approx(4 * 0.5 / 2)  # row 0's W clamped to 0
    assert metrics["variance_proxy/expected_w"] == pytest.approx((-1.6 + 0.75 + 0.5) / 2)  # unclamped
    assert metrics["variance_proxy/proxy3_pure_noise"] == 0.0  # ‖ḡ‖² = 100 > E[A²W]: floored at 0
    batch.batch.pop("sum_pi_squared")
    assert compute_variance_proxy_metrics(batch, gradient_norm=0.5) == {}
