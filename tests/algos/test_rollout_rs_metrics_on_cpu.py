"""verl 0.9's rejection-sampling spread metrics (``rollout_rs_<option>_std`` and ``_seq_*``) against hand-computed values.

Same example as test_rollout_correction_on_cpu.py: ratios r = [[0.5, 1, 4], [1.5, 3, (padding)]], m = [[1,1,1],[1,1,0]].
    k1 = −log r      = [[ 0.6931, 0, −1.3863], [−0.4055, −1.0986]]
    k2 = ½ (log r)²  = [[ 0.2402, 0,  0.9609], [ 0.0822,  0.6035]]
"""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.algos.rollout_rs import compute_rejection_mask, parse_rs_options

LOG_RATIO = torch.log(torch.tensor([[0.5, 1.0, 4.0], [1.5, 3.0, 9.0]]))
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
K2 = [0.5 * math.log(r) ** 2 for r in (0.5, 1.0, 4.0, 1.5, 3.0)]  # valid tokens, row-major


def _std_of(values: list[float]) -> float:
    """Population std sqrt(mean(v²) − mean(v)²) (verl's token-weighted std)."""
    mean = sum(values) / len(values)
    return math.sqrt(sum(v * v for v in values) / len(values) - mean * mean)


def test_token_option_std_is_of_the_clamped_statistic_and_seq_metrics_of_sequence_means():
    _, metrics = compute_rejection_mask(LOG_RATIO, MASK, parse_rs_options("token_k2", 0.7))
    prefix = "rollout_rs_token_k2"
    # k2 clamped to [0, 0.7]: [0.2402, 0, 0.7, 0.0822, 0.6035] → std 0.2793
    clamped = [min(k, 0.7) for k in K2]
    assert metrics[f"{prefix}_std"] == pytest.approx(_std_of(clamped), rel=1e-4)
    assert metrics[f"{prefix}_std"] == pytest.approx(0.2793, abs=1e-4)
    # per-sequence means: (0.2402 + 0 + 0.9609) / 3 = 0.4004, (0.0822 + 0.6035) / 2 = 0.3428
    seq = [sum(K2[:3]) / 3, sum(K2[3:]) / 2]
    assert metrics[f"{prefix}_seq_mean"] == pytest.approx(sum(seq) / 2, rel=1e-5)
    assert metrics[f"{prefix}_seq_std"] == pytest.approx(abs(seq[0] - seq[1]) / math.sqrt(2), rel=1e-4)  # n − 1
    assert metrics[f"{prefix}_seq_max"] == pytest.approx(seq[0], rel=1e-5)
    assert metrics[f"{prefix}_seq_min"] == pytest.approx(seq[1], rel=1e-5)
    assert metrics[f"{prefix}_seq_max_deviation"] == pytest.approx(seq[0], rel=1e-5)  # |value − 0|
    assert metrics[f"{prefix}_seq_fraction_high"] == 0.0  # no sequence mean above 0.7
    assert f"{prefix}_seq_fraction_low" not in metrics  # k2 has no lower bound (verl leaves the key out)


def test_sequence_k1_option_clamps_to_both_log_bounds():
    _, metrics = compute_rejection_mask(LOG_RATIO, MASK, parse_rs_options("seq_mean_k1", "0.6_1.5"))
    prefix = "rollout_rs_seq_mean_k1"
    lower, upper = math.log(0.6), math.log(1.5)  # −0.5108, 0.4055
    # mean k1 per sequence: (0.6931 + 0 − 1.3863) / 3 = −0.2310, (−0.4055 − 1.0986) / 2 = −0.7520
    seq = [-math.log(0.5 * 1.0 * 4.0) / 3, -math.log(1.5 * 3.0) / 2]
    # token-weighted over the 5 valid tokens, each sequence's value clamped: 3 × −0.2310, 2 × −0.5108 → std 0.1370
    per_token = [max(min(seq[0], upper), lower)] * 3 + [max(min(seq[1], upper), lower)] * 2
    assert metrics[f"{prefix}_std"] == pytest.approx(_std_of(per_token), rel=1e-4)
    assert metrics[f"{prefix}_std"] == pytest.approx(0.1370, abs=1e-4)
    assert metrics[f"{prefix}_seq_mean"] == pytest.approx(sum(seq) / 2, rel=1e-5)
    assert metrics[f"{prefix}_seq_std"] == pytest.approx(abs(seq[0] - seq[1]) / math.sqrt(2), rel=1e-4)
    assert metrics[f"{prefix}_seq_max"] == pytest.approx(seq[0], rel=1e-5)
    assert metrics[f"{prefix}_seq_min"] == pytest.approx(seq[1], rel=1e-5)
    assert metrics[f"{prefix}_seq_max_deviation"] == pytest.approx(-seq[1], rel=1e-5)
    assert metrics[f"{prefix}_seq_fraction_high"] == 0.0
    assert metrics[f"{prefix}_seq_fraction_low"] == 0.5  # −0.7520 < log 0.6


def test_one_valid_token_has_zero_std():
    _, metrics = compute_rejection_mask(LOG_RATIO, torch.tensor([[1, 0, 0], [0, 0, 0]]), parse_rs_options("token_k3", 1.0))
    assert metrics["rollout_rs_token_k3_std"] == 0.0
    assert metrics["rollout_rs_token_k3_seq_std"] == 0.0  # one non-empty sequence
    k3 = 0.5 - 1.0 - math.log(0.5)  # r − 1 − log r at r = 0.5: 0.1931
    assert metrics["rollout_rs_token_k3_seq_mean"] == pytest.approx(k3, rel=1e-5)
