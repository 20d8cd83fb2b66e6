"""``hybridrl.trainer.ppo.rollout_corr_helper``: verl 0.9's helper signatures over hybridrl's rollout-correction math,
checked on hand-computed values."""

import math

import pytest
import torch

from hybridrl.algos.rollout_correction_config import RolloutCorrectionParams
from hybridrl.protocol import DataProto
from hybridrl.trainer.config import RolloutCorrectionConfig
from hybridrl.trainer.ppo import rollout_corr_helper as helper

# two sequences of two tokens; the second sequence's last token is padding
# log r = log π_old − log π_rollout = [[0, log 3], [log 0.25, (padding)]]  →  ρ = [[1, 3], [0.25, -]]
OLD = torch.tensor([[0.0, math.log(3.0)], [math.log(0.25), 0.0]])
ROLLOUT = torch.zeros(2, 2)
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])


def test_token_tis_weights():
    weights, metrics = helper.compute_rollout_correction_weights(OLD - ROLLOUT, MASK, "token", 2.0)
    # w = min(ρ, 2): [[1, 2], [0.25, 0 (padding)]]
    torch.testing.assert_close(weights, torch.tensor([[1.0, 2.0], [0.25, 0.0]]))
    assert metrics["rollout_is_mean"] == pytest.approx((1 + 2 + 0.25) / 3)
    assert metrics["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3)  # ρ = 3 > 2
    assert metrics["rollout_is_ratio_fraction_low"] == pytest.approx(1 / 3)  # ρ = 0.25 < 1/2


def test_token_icepop_zeroes_out_of_bounds_weights():
    weights, _ = helper.compute_rollout_correction_weights(OLD - ROLLOUT, MASK, "token", "0.5_2.0")
    torch.testing.assert_close(weights, torch.tensor([[1.0, 0.0], [0.0, 0.0]]))  # 3 and 0.25 lie outside


def test_rejection_mask_token_k1():
    mask, metrics = helper.compute_rollout_rejection_mask(OLD - ROLLOUT, MASK, "token_k1", "0.5_2.0")
    torch.testing.assert_close(mask, torch.tensor([[1.0, 0.0], [0.0, 0.0]]))  # log 3 > log 2, log 0.25 < log 0.5
    assert metrics["rollout_rs_masked_fraction"] == pytest.approx(2 / 3)
    assert metrics["rollout_rs_seq_masked_fraction"] == pytest.approx(1.0)
    assert {"token_k1", "seq_mean_k3"} <= helper.SUPPORTED_ROLLOUT_RS_OPTIONS
    assert helper.TOKEN_LEVEL_ROLLOUT_RS_OPTIONS == {"token_k1", "token_k2", "token_k3"}


def test_combined_call_returns_verl_shapes():
    weights, mask, metrics = helper.compute_rollout_correction_and_rejection_mask(
        OLD, ROLLOUT, MASK, rollout_is="sequence", rollout_is_threshold=2.0
    )
    # sequence IS: w_i = min(exp Σ_t log r, 2): seq 0 → min(3, 2) = 2; seq 1 → 0.25
    torch.testing.assert_close(weights.batch["rollout_is_weights"], torch.tensor([[2.0, 2.0], [0.25, 0.0]]))
    torch.testing.assert_close(mask, MASK)
    assert mask is not MASK  # a copy, as verl's clone
    assert all(key.startswith("rollout_corr/") for key in metrics)
    # k1 KL(π_rollout ‖ π_old) = mean over valid tokens of (log π_rollout − log π_old) = (0 − log 3 − log 0.25) / 3
    assert metrics["rollout_corr/kl"] == pytest.approx((-math.log(3.0) - math.log(0.25)) / 3)
    none, _, _ = helper.compute_rollout_correction_and_rejection_mask(OLD, ROLLOUT, MASK)
    assert none is None
    with pytest.raises(ValueError, match="rollout_rs_threshold"):
        helper.compute_rollout_correction_and_rejection_mask(OLD, ROLLOUT, MASK, rollout_rs="token_k1")
    with pytest.raises(TypeError, match="not a boolean"):  # True is no threshold of 1.0
        helper.compute_rollout_correction_and_rejection_mask(OLD, ROLLOUT, MASK, "token", rollout_is_threshold=True)


def test_offpolicy_metrics_without_rollout_log_probs():
    metrics = helper.compute_offpolicy_metrics(OLD, None, MASK)
    # per-sequence mean log π_old: seq 0 → log 3 / 2, seq 1 → log 0.25; training_ppl = mean_i exp(−mean_t)
    expected = (math.exp(-math.log(3.0) / 2) + math.exp(-math.log(0.25))) / 2
    assert set(metrics) == {"training_ppl", "training_log_ppl"}
    assert metrics["training_ppl"] == pytest.approx(expected)
    prefixed = helper.compute_rollout_corr_metrics_from_logprobs(OLD, ROLLOUT, MASK)
    assert prefixed["rollout_corr/training_ppl"] == pytest.approx(expected)


def test_is_metrics_adapter_icepop():
    raw = torch.tensor([[1.0, 3.0], [0.25, 0.0]])
    metrics = helper.compute_is_metrics(
        raw.clamp(max=2.0), raw, torch.log(raw.clamp(min=1e-6)), MASK, "token", 2.0, 0.5
    )
    assert metrics["rollout_is_oob_ratio"] == pytest.approx(2 / 3)  # IcePop only: 3 and 0.25 out of [0.5, 2]


def _batch() -> DataProto:
    return DataProto.from_dict(tensors={"old_log_probs": OLD, "rollout_log_probs": ROLLOUT, "response_mask": MASK})


def test_add_to_batch_and_bypass():
    batch, metrics = helper.compute_rollout_correction_and_add_to_batch(
        _batch(), RolloutCorrectionConfig.decoupled_token_is(threshold=2.0)
    )
    torch.testing.assert_close(batch.batch["rollout_is_weights"], torch.tensor([[1.0, 2.0], [0.25, 0.0]]))
    assert "rollout_corr/rollout_is_mean" in metrics
    batch = _batch()
    helper.apply_bypass_mode(batch, RolloutCorrectionConfig.bypass_pg_is())
    assert batch.batch["old_log_probs"] is batch.batch["rollout_log_probs"]
    params = batch.meta_info["rollout_correction"]
    assert isinstance(params, RolloutCorrectionParams) and params.bypass_mode and params.loss_type == "reinforce"
    with pytest.raises(ValueError, match="calculate_log_probs"):
        helper.apply_bypass_mode(DataProto.from_dict(tensors={"old_log_probs": OLD}))
