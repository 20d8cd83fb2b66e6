"""Rollout correction math (hybridrl.algos.rollout_is / rollout_rs / rollout_correction) against hand-computed values.

Shared example, 2 sequences × 3 tokens, the second with 2 valid tokens:
    ratio r = π_train / π_rollout = [[0.5, 1, 4], [1.5, 3, (9, padding)]],  m = [[1, 1, 1], [1, 1, 0]]
so log r = log of those, and
    k1 = −log r       = [[ 0.693, 0,      −1.386], [−0.405, −1.099]]
    k2 = ½ (log r)²   = [[ 0.240, 0,       0.961], [ 0.082,  0.603]]
    k3 = r − 1 − log r = [[0.193, 0,       1.614], [ 0.095,  0.901]]
Thresholds stay clear of these values so float32 rounding cannot flip a comparison.
"""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.algos import policy_loss_modes, policy_losses
from hybridrl.algos.params import policy_loss_params
from hybridrl.algos.rollout_correction import (
    METRIC_PREFIX,
    bypass_policy_loss,
    compute_offpolicy_metrics,
    compute_rollout_correction,
    rollout_correction_params,
)
from hybridrl.algos.rollout_is import ISThreshold, compute_rollout_is_weights, parse_is_threshold
from hybridrl.algos.rollout_rs import compute_rejection_mask, parse_rs_options

RATIO = torch.tensor([[0.5, 1.0, 4.0], [1.5, 3.0, 9.0]])
LOG_RATIO = torch.log(RATIO)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def _section(**overrides):
    """algorithm.rollout_correction with verl 0.9's defaults (shared/reference/verl-0.9-additions-keys.tsv)."""
    section = dict(rollout_is=None, rollout_is_threshold=2.0, rollout_rs=None, rollout_rs_threshold=None,
                   bypass_mode=False, loss_type="ppo_clip", rollout_is_batch_normalize=False)
    return {**section, **overrides}


# ---------------------------------------------------------------------------- IS weights
def test_token_tis_truncates_at_the_upper_bound_and_zeroes_padding():
    weights, metrics = compute_rollout_is_weights(LOG_RATIO, MASK, "token", ISThreshold(upper=2.0))
    # min(r, 2) on valid tokens, 0 on padding
    torch.testing.assert_close(weights, torch.tensor([[0.5, 1.0, 2.0], [1.5, 2.0, 0.0]]))
    assert metrics["rollout_is_mean"] == pytest.approx(7.0 / 5)  # (0.5 + 1 + 2 + 1.5 + 2) / 5
    assert metrics["rollout_is_max"] == pytest.approx(2.0) and metrics["rollout_is_min"] == pytest.approx(0.5)
    assert metrics["rollout_is_ratio_fraction_high"] == pytest.approx(2 / 5)  # raw 4 and 3 exceed 2
    assert metrics["rollout_is_ratio_fraction_low"] == pytest.approx(0.0)  # none below 1/2 (0.5 is not < 0.5)
    assert not weights.requires_grad


def test_token_icepop_zeroes_weights_outside_the_bounds():
    weights, metrics = compute_rollout_is_weights(LOG_RATIO, MASK, "token", parse_is_threshold("0.6_3.5"))
    # kept when 0.6 <= r <= 3.5: 0.5 and 4 are out (weight 0), the rest keep their raw ratio
    torch.testing.assert_close(weights, torch.tensor([[0.0, 1.0, 0.0], [1.5, 3.0, 0.0]]))
    assert metrics["rollout_is_oob_ratio"] == pytest.approx(2 / 5)


def test_sequence_is_is_the_product_of_the_ratios_truncated():
    # Π r: sequence 0 = 0.5·1·4 = 2, sequence 1 = 1.5·3 = 4.5 (the padded 9 does not count); upper 3
    weights, metrics = compute_rollout_is_weights(LOG_RATIO, MASK, "sequence", ISThreshold(upper=3.0))
    torch.testing.assert_close(weights, torch.tensor([[2.0, 2.0, 2.0], [3.0, 3.0, 0.0]]))
    assert metrics["rollout_is_max"] == pytest.approx(4.5, rel=1e-5)  # the untruncated product
    assert metrics["rollout_is_min"] == pytest.approx(2.0, rel=1e-5)
    assert metrics["rollout_is_ratio_fraction_high"] == pytest.approx(0.5)  # one sequence of two above 3


@pytest.mark.parametrize(
    ("level", "upper", "expected", "factor"),
    [
        # token: mean over valid tokens = 7/5 = 1.4
        ("token", 2.0, torch.tensor([[0.5, 1.0, 2.0], [1.5, 2.0, 0.0]]) / 1.4, 1.4),
        # sequence: mean over sequences of their weight = (2 + 3) / 2 = 2.5 (a token mean would be 12/5 = 2.4)
        ("sequence", 3.0, torch.tensor([[0.8, 0.8, 0.8], [1.2, 1.2, 0.0]]), 2.5),
    ],
)
def test_batch_normalization_divides_by_the_mean_after_truncation(level, upper, expected, factor):
    weights, metrics = compute_rollout_is_weights(LOG_RATIO, MASK, level, ISThreshold(upper), batch_normalize=True)
    torch.testing.assert_close(weights, expected)
    assert metrics["rollout_is_batch_norm_factor"] == pytest.approx(factor, rel=1e-5)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [(2.0, ISThreshold(2.0)), ("5", ISThreshold(5.0)), ("0.5_5.0", ISThreshold(5.0, 0.5)), (3, ISThreshold(3.0))],
)
def test_is_threshold_forms(spec, expected):
    assert parse_is_threshold(spec) == expected


@pytest.mark.parametrize("spec", ["abc", "2_1", 0, -1.0, "0_2", True, None, "a_2"])
def test_bad_is_thresholds_are_refused(spec):
    with pytest.raises(ValueError, match="rollout_is_threshold"):
        parse_is_threshold(spec)


# ---------------------------------------------------------------------------- rejection sampling
@pytest.mark.parametrize(
    ("option", "threshold", "expected_mask"),
    [
        # k1 in [log 0.4, log 2.5] = [−0.916, 0.916]: −1.386 (r=4) and −1.099 (r=3) are out
        ("token_k1", "2.5", [[1, 1, 0], [1, 0, 0]]),
        ("token_k1", "0.4_2.5", [[1, 1, 0], [1, 0, 0]]),  # the same bounds written out
        ("token_k2", 0.7, [[1, 1, 0], [1, 1, 0]]),  # only k2 = 0.961 > 0.7
        ("token_k3", 1.0, [[1, 1, 0], [1, 1, 0]]),  # only k3 = 1.614 > 1
        # Σ k1: sequence 0 = −log 2 = −0.693, sequence 1 = −log 4.5 = −1.504; bounds [log 0.3, log 3] = [−1.204, 1.099]
        ("seq_sum_k1", "0.3_3.0", [[1, 1, 1], [0, 0, 0]]),
        # geometric mean: mean k1 = −0.231 / −0.752; bounds [log 0.6, log 1.5] = [−0.511, 0.405]
        ("seq_mean_k1", "0.6_1.5", [[1, 1, 1], [0, 0, 0]]),
        ("seq_mean_k2", 0.37, [[0, 0, 0], [1, 1, 0]]),  # mean k2 = 0.400 / 0.343
        ("seq_sum_k3", 1.0, [[0, 0, 0], [1, 1, 0]]),  # Σ k3 = 1.807 / 0.996
        ("seq_max_k2", 0.8, [[0, 0, 0], [1, 1, 0]]),  # max k2 = 0.961 / 0.603
        ("seq_max_k3", 1.0, [[0, 0, 0], [1, 1, 0]]),  # max k3 = 1.614 / 0.901
    ],
)
def test_each_rejection_option(option, threshold, expected_mask):
    mask, metrics = compute_rejection_mask(LOG_RATIO, MASK, parse_rs_options(option, threshold))
    assert mask.tolist() == expected_mask and mask.dtype == MASK.dtype
    rejected = 5 - sum(map(sum, expected_mask))
    assert metrics["rollout_rs_masked_fraction"] == pytest.approx(rejected / 5)
    assert metrics[f"rollout_rs_{option}_masked_fraction"] == pytest.approx(rejected / 5)


def test_options_combine_with_and_and_report_per_option():
    # token_k1 keeps [[1,1,0],[1,0,0]], seq_max_k2 keeps [[0,0,0],[1,1,0]]: both must keep a token
    mask, metrics = compute_rejection_mask(LOG_RATIO, MASK, parse_rs_options("token_k1, seq_max_k2", "2.5,0.8"))
    assert mask.tolist() == [[0, 0, 0], [1, 0, 0]]
    assert metrics["rollout_rs_masked_fraction"] == pytest.approx(4 / 5)
    assert metrics["rollout_rs_seq_masked_fraction"] == pytest.approx(1.0)  # both sequences lost a token
    assert metrics["rollout_rs_token_k1_fraction_low"] == pytest.approx(2 / 5)  # k1 below log 0.4: r = 4, 3
    assert metrics["rollout_rs_seq_max_k2_max"] == pytest.approx(0.5 * math.log(4) ** 2, rel=1e-5)
    assert metrics["rollout_rs_seq_max_k2_fraction_high"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("options", "threshold", "match"),
    [
        ("token_k4", 1.0, "unknown option"),
        ("seq_max_k1", 1.0, "unknown option"),  # verl has no seq_max_k1
        ("token_k1", None, "needs rollout_rs_threshold"),
        ("token_k2", "0.1_0.5", "one upper bound"),
        ("token_k1,seq_max_k2", "1,2,3", "one per option"),
        ("token_k1", "2_1", "lower <= upper"),
        ("token_k3", -1, "> 0"),
    ],
)
def test_bad_rejection_specs_are_refused(options, threshold, match):
    with pytest.raises(ValueError, match=match):
        parse_rs_options(options, threshold)


# ---------------------------------------------------------------------------- off-policy metrics
def test_offpolicy_metrics_by_hand():
    train = torch.tensor([[-1.0, -2.0], [-0.5, -9.0]])
    rollout = torch.tensor([[-1.5, -1.0], [-0.5, -7.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    m = compute_offpolicy_metrics(train, rollout, mask)
    # log r on valid tokens: 0.5, −1, 0
    assert m["kl"] == pytest.approx((-0.5 + 1.0 + 0.0) / 3)
    assert m["k3_kl"] == pytest.approx((math.exp(0.5) - 1.5 + math.exp(-1) + 0.0) / 3, rel=1e-5)
    # per-sequence mean log-prob: train [−1.5, −0.5], rollout [−1.25, −0.5]
    assert m["training_ppl"] == pytest.approx((math.exp(1.5) + math.exp(0.5)) / 2, rel=1e-5)
    assert m["training_log_ppl"] == pytest.approx(1.0)
    assert m["rollout_ppl"] == pytest.approx((math.exp(1.25) + math.exp(0.5)) / 2, rel=1e-5)
    assert m["log_ppl_diff"] == pytest.approx(0.125) and m["log_ppl_diff_max"] == pytest.approx(0.25)
    assert m["ppl_ratio"] == pytest.approx((math.exp(0.25) + 1.0) / 2, rel=1e-5)
    assert m["chi2_token"] == pytest.approx((math.e + math.exp(-2) + 1.0) / 3 - 1.0, rel=1e-5)
    assert m["chi2_seq"] == pytest.approx((math.exp(-1) + 1.0) / 2 - 1.0, rel=1e-5)  # Σ log r = −0.5, 0


def test_correction_metrics_carry_verls_prefix_and_names():
    params = rollout_correction_params(_section(rollout_is="token", rollout_rs="token_k1", rollout_rs_threshold=2.5))
    train = torch.zeros(2, 3)
    correction = compute_rollout_correction(train, train - LOG_RATIO, MASK, params)
    expected = {"rollout_is_mean", "rollout_is_max", "rollout_is_min", "rollout_is_ratio_fraction_high",
                "rollout_is_ratio_fraction_low", "rollout_is_eff_sample_size", "rollout_rs_masked_fraction",
                "rollout_rs_seq_masked_fraction", "kl", "k3_kl", "chi2_token", "chi2_seq", "ppl_ratio",
                "training_ppl", "rollout_ppl", "log_ppl_diff"}
    assert {METRIC_PREFIX + name for name in expected} <= set(correction.metrics)
    assert all(key.startswith("rollout_corr/") for key in correction.metrics)
    torch.testing.assert_close(correction.weights, torch.tensor([[0.5, 1.0, 2.0], [1.5, 2.0, 0.0]]))
    assert correction.response_mask.tolist() == [[1, 1, 0], [1, 0, 0]]


def test_params_parse_and_refuse_unknown_modes():
    params = rollout_correction_params(_section())
    assert params.rollout_is is None and params.rs_options == () and not params.corrects and not params.bypass_mode
    with pytest.raises(ValueError, match="rollout_is"):
        rollout_correction_params(_section(rollout_is="geometric"))
    with pytest.raises(ValueError, match="loss_type"):
        rollout_correction_params(_section(loss_type="gspo"))


# ---------------------------------------------------------------------------- the losses
ADVANTAGES = torch.tensor([[1.0, -2.0, 3.0], [0.5, 1.0, 0.0]])


def test_ppo_clip_multiplies_each_tokens_loss_by_the_weight():
    log_prob = torch.zeros(2, 3)
    weights = torch.tensor([[0.5, 1.0, 2.0], [1.5, 2.0, 0.0]])
    # ρ = 1, so ℓ = −A; token-mean of −A·w: −(0.5 − 2 + 6 + 0.75 + 2) / 5 = −1.45
    loss, _ = policy_losses.ppo_clip_loss(log_prob, log_prob, ADVANTAGES, MASK, 0.2, 0.2, rollout_is_weights=weights)
    assert loss.item() == pytest.approx(-1.45)
    plain, _ = policy_losses.ppo_clip_loss(log_prob, log_prob, ADVANTAGES, MASK, 0.2, 0.2)
    none, _ = policy_losses.ppo_clip_loss(log_prob, log_prob, ADVANTAGES, MASK, 0.2, 0.2, rollout_is_weights=None)
    assert torch.equal(plain, none)  # no weights: bit for bit today's loss


@pytest.mark.parametrize("mode", policy_loss_modes.BUILTIN_LOSS_MODES)
def test_every_builtin_loss_scales_with_the_weights(mode):
    """A weight of 2 on every token doubles each loss (GMPO: the geometric mean of 2s is 2)."""
    params = policy_loss_params({"clip_ratio": 0.2, "policy_loss": {"clip_cov_ratio": 0.5, "kl_cov_ratio": 0.5,
                                                                    "dro_beta": 0.5}},
                                "token-mean")
    loss_fn = policy_loss_modes.bind_policy_loss(mode, params)
    gen = torch.Generator().manual_seed(0)
    old, new = torch.randn(2, 3, generator=gen), torch.randn(2, 3, generator=gen)
    torch.manual_seed(1)  # clip_cov draws its detached tokens from the global RNG
    plain, _ = loss_fn(old, new, ADVANTAGES, MASK)
    torch.manual_seed(1)
    doubled, _ = loss_fn(old, new, ADVANTAGES, MASK, rollout_is_weights=torch.full((2, 3), 2.0))
    torch.testing.assert_close(doubled, 2 * plain)


def test_reinforce_loss_by_hand():
    log_prob = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -3.0]])
    weights = torch.tensor([[0.5, 1.0, 2.0], [1.5, 2.0, 0.0]])
    loss, metrics = policy_losses.reinforce_loss(log_prob, log_prob, ADVANTAGES, MASK, rollout_is_weights=weights)
    # −A·log π·w on valid tokens: 0.5, −4, 3, 0.75, 2 → sum 2.25, token-mean over 5 = 0.45
    assert loss.item() == pytest.approx(0.45)
    assert metrics["actor/ppo_kl"].item() == 0.0


def test_bypass_equals_the_old_log_prob_path_when_the_log_probs_are_equal():
    """Decoupled with π_old = π_rollout (weights 1, nothing rejected) and bypass (π_rollout as π_old) give the
    same loss and gradient."""
    rollout = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -3.0]])
    section = _section(rollout_is="token", rollout_rs="token_k1,seq_mean_k3", rollout_rs_threshold="2.0,0.5")
    decoupled = compute_rollout_correction(rollout.clone(), rollout, MASK, rollout_correction_params(section))
    assert decoupled.response_mask.tolist() == MASK.tolist()
    torch.testing.assert_close(decoupled.weights, MASK.float())
    grads = []
    for bypass in (False, True):
        log_prob = rollout.clone().requires_grad_(True)
        if bypass:
            params = rollout_correction_params({**section, "bypass_mode": True})
            loss, metrics = bypass_policy_loss(rollout, log_prob, ADVANTAGES, MASK, params=params,
                                               clip_ratio_low=0.2, clip_ratio_high=0.2)
            assert metrics["rollout_corr/rollout_rs_masked_fraction"].item() == 0.0
        else:
            loss, _ = policy_losses.ppo_clip_loss(rollout, log_prob, ADVANTAGES, decoupled.response_mask, 0.2, 0.2,
                                                  rollout_is_weights=decoupled.weights)
        loss.backward()
        grads.append((loss.detach(), log_prob.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    torch.testing.assert_close(grads[0][1], grads[1][1])


def test_bypass_reinforce_applies_weights_and_rejection_from_the_current_policy():
    rollout = torch.zeros(2, 3)
    log_prob = LOG_RATIO.clone()  # π_θ / π_rollout = RATIO
    params = rollout_correction_params(_section(rollout_is="token", rollout_rs="token_k1", rollout_rs_threshold=2.5,
                                                bypass_mode=True, loss_type="reinforce"))
    loss, metrics = bypass_policy_loss(rollout, log_prob, ADVANTAGES, MASK, params=params,
                                       clip_ratio_low=0.2, clip_ratio_high=0.2)
    # kept tokens [[1,1,0],[1,0,0]], weights min(r, 2) = 0.5, 1, 1.5 there; ℓ = −A·log r·w:
    # −1·log 0.5·0.5 + 2·0·1 − 0.5·log 1.5·1.5, token-mean over 3 kept tokens
    expected = (-math.log(0.5) * 0.5 - 0.5 * math.log(1.5) * 1.5) / 3
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"].item() == pytest.approx(2 / 5)
