"""agg_loss, KL estimators and controllers, value and entropy losses."""

from __future__ import annotations

import math

import pytest
import torch
from config_testlib import compose_section

from hybridrl.trainer.ppo import core_algos
from hybridrl.trainer.ppo.core_algos import (
    AdaptiveKLController,
    FixedKLController,
    agg_loss,
    get_kl_controller,
    kl_penalty,
)

ATOL = 1e-5

# ---------------------------------------------------------------------------
# agg_loss
# ---------------------------------------------------------------------------

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    "mode, scale, expected",
    [
        ("token-mean", None, 7 / 3),  # (1 + 2 + 4) / 3 valid tokens
        ("seq-mean-token-sum", None, 3.5),  # rows (1 + 2, 4) → mean(3, 4)
        ("seq-mean-token-mean", None, 2.75),  # rows (3/2, 4/1) → mean(1.5, 4)
        ("token-sum", None, 7.0),  # 1 + 2 + 4, no normalisation
        ("seq-mean-token-sum-norm", None, 7 / 6),  # (3 + 4) / 2 rows / T with T = 3 (verl 0.9)
        ("seq-mean-token-sum-norm", 7.0, 0.5),  # (3 + 4) / 2 rows / loss_scale_factor 7
    ],
)
def test_agg_loss_hand_computed(mode, scale, expected):
    assert agg_loss(LOSS, MASK, mode, loss_scale_factor=scale).item() == pytest.approx(expected, abs=ATOL)


def test_seq_mean_token_sum_norm_divides_by_padded_length_not_by_tokens_or_rows():
    # one extra padding column: T = 4, while valid tokens = 3 and B = 2
    loss = torch.cat([LOSS, torch.full((2, 1), 100.0)], dim=1)
    mask = torch.cat([MASK, torch.zeros(2, 1)], dim=1)
    # (1 + 2) + 4 = 7 over 2 rows over T = 4 → 0.875 (token-mean would give 7/3, seq-mean-token-sum 3.5)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(0.875, abs=ATOL)
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx(7 / 3, abs=ATOL)


def test_agg_loss_seq_modes_skip_fully_masked_rows_as_v090():
    loss = torch.tensor([[2.0, 2.0], [9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])  # second row fully masked
    # verl 0.9: the empty row is left out → (2 + 2) / 1 = 4 (v0.5.0 averaged over both rows: 2)
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(4.0)
    # seq-mean-token-mean: 4 / 2 tokens = 2 over 1 row; the empty row is 0 / (0 + 1e-8) = 0, not NaN
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(2.0)


def test_agg_loss_unknown_mode_lists_valid():
    with pytest.raises(ValueError) as err:
        agg_loss(LOSS, MASK, "token-summ")
    for mode in core_algos.LOSS_AGG_MODES:
        assert mode in str(err.value)


# ---------------------------------------------------------------------------
# KL estimators
# ---------------------------------------------------------------------------

LOGP = torch.tensor([[-1.0, -2.0]])
REF = torch.tensor([[-2.0, -1.0]])  # δ = logπ − logπ_ref = [1, −1]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("kl", [1.0, -1.0]),
        ("k1", [1.0, -1.0]),
        ("abs", [1.0, 1.0]),
        ("mse", [0.5, 0.5]),  # ½δ²
        ("k2", [0.5, 0.5]),
        # k3 = e^{−δ} + δ − 1: δ = 1 → e^{−1} = 0.367879; δ = −1 → e − 2 = 0.718282
        ("low_var_kl", [math.exp(-1), math.e - 2]),
        ("k3", [math.exp(-1), math.e - 2]),
    ],
)
def test_kl_penalty_hand_computed(name, expected):
    assert kl_penalty(LOGP, REF, name)[0].tolist() == pytest.approx(expected, abs=ATOL)


def test_k3_clamps():
    logp = torch.tensor([[0.0, -30.0]])
    ref = torch.tensor([[-30.0, 0.0]])
    # t0: log r = −30 → clamped −20 → e^−20 + 20 − 1 ≈ 19 → clamped 10
    # t1: log r = 30 → clamped 20 → e^20 − 21 ≈ 4.85e8 → clamped 10
    assert kl_penalty(logp, ref, "low_var_kl")[0].tolist() == [10.0, 10.0]


@pytest.mark.parametrize("base", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
def test_straight_through_value_of_base_gradient_of_k2(base):
    logp = torch.tensor([[-1.0, -2.0, -0.3]], requires_grad=True)
    ref = torch.tensor([[-2.0, -1.0, -0.3]])
    value = kl_penalty(logp, ref, base + "+")
    torch.testing.assert_close(value, kl_penalty(logp, ref, base))
    value.sum().backward()
    # d(½δ²)/dlogπ = δ = [1, −1, 0]
    assert logp.grad[0].tolist() == pytest.approx([1.0, -1.0, 0.0], abs=ATOL)


def test_kl_full_and_unknown_raise_not_implemented():
    with pytest.raises(NotImplementedError, match="full"):
        kl_penalty(LOGP, REF, "full")
    with pytest.raises(NotImplementedError) as err:
        kl_penalty(LOGP, REF, "k4")
    assert "low_var_kl" in str(err.value) and "k3+" in str(err.value)


# ---------------------------------------------------------------------------
# KL controllers
# ---------------------------------------------------------------------------


def test_adaptive_kl_hand_computed_and_direction():
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=100)
    ctrl.update(current_kl=0.2, n_steps=10)
    # e = clip(0.2/0.1 − 1, ±0.2) = 0.2 → β = 0.1·(1 + 0.2·10/100) = 0.102
    assert ctrl.value == pytest.approx(0.102)
    ctrl.update(current_kl=0.05, n_steps=10)
    # e = clip(0.5 − 1, ±0.2) = −0.2 → β = 0.102·0.98 = 0.09996
    assert ctrl.value == pytest.approx(0.09996)
    ctrl.update(current_kl=0.11, n_steps=10)
    # e = 0.1 (inside the clip) → β = 0.09996·1.01
    assert ctrl.value == pytest.approx(0.09996 * 1.01)
    before = ctrl.value
    ctrl.update(current_kl=0.1, n_steps=10)  # on target: unchanged
    assert ctrl.value == pytest.approx(before)


def test_fixed_kl_never_moves_and_state_round_trips():
    ctrl = FixedKLController(kl_coef=0.001)
    ctrl.update(current_kl=5.0, n_steps=100)
    assert ctrl.value == 0.001
    adaptive = AdaptiveKLController(0.1, 0.1, 100)
    adaptive.update(0.5, 10)
    restored = AdaptiveKLController(0.1, 0.1, 100)
    restored.load_state_dict(adaptive.state_dict())
    assert restored.value == adaptive.value


def test_get_kl_controller_from_config():
    fixed = get_kl_controller(compose_section("algorithm.kl_ctrl"))  # fixed, 0.001, 10000, 0.1
    assert isinstance(fixed, FixedKLController) and fixed.value == 0.001
    adaptive = get_kl_controller({"type": "adaptive", "kl_coef": 0.2, "horizon": 10000, "target_kl": 0.1})
    assert isinstance(adaptive, AdaptiveKLController)
    assert (adaptive.value, adaptive.target, adaptive.horizon) == (0.2, 0.1, 10000)
    with pytest.raises(ValueError, match="algorithm.kl_ctrl.horizon"):
        get_kl_controller({"type": "adaptive", "kl_coef": 0.2, "horizon": 0, "target_kl": 0.1})
    with pytest.raises(NotImplementedError, match="fixed"):
        get_kl_controller({"type": "pid", "kl_coef": 0.2, "horizon": 1, "target_kl": 0.1})


# ---------------------------------------------------------------------------
# Value and entropy losses
# ---------------------------------------------------------------------------


def test_value_loss_hand_computed():
    vpreds = torch.tensor([[1.0, 0.0]], requires_grad=True)
    values = torch.tensor([[0.5, 0.5]])
    returns = torch.tensor([[2.0, 0.0]])
    vf_loss, vf_clipfrac = core_algos.compute_value_loss(vpreds, returns, values, torch.ones(1, 2), cliprange_value=0.2)
    # V_clip = clip(V_pred, 0.3, 0.7) = [0.7, 0.3]
    # (V_pred − R)² = [1, 0]; (V_clip − R)² = [1.69, 0.09]; max = [1.69, 0.09]
    # vf_loss = ½ · mean = ½ · 0.89 = 0.445; both tokens took the clipped branch → clipfrac 1
    assert vf_loss.item() == pytest.approx(0.445, abs=ATOL)
    assert vf_clipfrac.item() == pytest.approx(1.0)
    vf_loss.backward()
    # the clipped branch is flat in V_pred (V_pred is outside [0.3, 0.7]): zero gradient
    assert vpreds.grad[0].tolist() == [0.0, 0.0]


def test_value_loss_unclipped_gradient():
    vpreds = torch.tensor([[0.6]], requires_grad=True)
    vf_loss, vf_clipfrac = core_algos.compute_value_loss(
        vpreds, torch.tensor([[1.0]]), torch.tensor([[0.5]]), torch.ones(1, 1), cliprange_value=0.5
    )
    # inside the clip range: ½(0.6 − 1)² = 0.08, d/dV = (0.6 − 1) = −0.4
    assert vf_loss.item() == pytest.approx(0.08, abs=ATOL) and vf_clipfrac.item() == 0.0
    vf_loss.backward()
    assert vpreds.grad.item() == pytest.approx(-0.4, abs=ATOL)


def test_entropy_loss_hand_computed():
    logits = torch.zeros(2, 3, 4)  # uniform over 4 tokens → H = ln 4 = 1.386294 everywhere
    logits[1, 2] = torch.tensor([100.0, 0.0, 0.0, 0.0])  # near one-hot → H ≈ 0, masked out below
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    assert core_algos.compute_entropy_loss(logits, mask).item() == pytest.approx(math.log(4), abs=ATOL)


def test_compute_rewards_legacy():
    scores = torch.tensor([[0.0, 1.0]])
    # r = score − 0.5·(logπ_old − logπ_ref) = [0 − 0.5·1, 1 − 0.5·(−1)] = [−0.5, 1.5]
    assert core_algos.compute_rewards(scores, LOGP, REF, 0.5)[0].tolist() == [-0.5, 1.5]
