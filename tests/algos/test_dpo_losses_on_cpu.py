"""DPO-family losses: hand-computed values, a naive per-pair reference, gradient direction, weights."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.algos.dpo_losses import (
    DPO_LOSS_REGISTRY,
    compute_dpo_loss,
    get_dpo_loss_fn,
    sequence_log_prob,
    split_pairs,
)

# Two pairs. Pair 0: h = (−1 − −2) − (−1.5 − −1.5) = 1.   Pair 1: h = (−3 − −1) − (−1 − −1) = −2.
POLICY_CHOSEN = torch.tensor([-1.0, -3.0])
POLICY_REJECTED = torch.tensor([-2.0, -1.0])
REF_CHOSEN = torch.tensor([-1.5, -1.0])
REF_REJECTED = torch.tensor([-1.5, -1.0])
BETA = 0.5


def _naive_loss(loss_type: str, beta: float, eps: float) -> float:
    """Per-pair Python loop with math.* only: the reference for the vectorised code."""
    total = 0.0
    for pc, pr, rc, rr in zip(
        POLICY_CHOSEN.tolist(), POLICY_REJECTED.tolist(), REF_CHOSEN.tolist(), REF_REJECTED.tolist()
    ):
        h = (pc - pr) - (rc - rr)
        if loss_type == "sigmoid":
            sig = lambda x: 1.0 / (1.0 + math.exp(-x))  # noqa: E731
            total += -(1 - eps) * math.log(sig(beta * h)) - eps * math.log(sig(-beta * h))
        elif loss_type == "ipo":
            total += (h - 1 / (2 * beta)) ** 2
        else:
            total += max(0.0, 1 - beta * h)
    return total / len(POLICY_CHOSEN)


def _loss(loss_type: str, eps: float = 0.0, **kwargs):
    return compute_dpo_loss(POLICY_CHOSEN, POLICY_REJECTED, REF_CHOSEN, REF_REJECTED, BETA, loss_type, eps, **kwargs)


def test_sigmoid_hand_computed():
    # pair 0: βh = 0.5 → −log σ(0.5) = log(1 + e^−0.5) = log(1.6065307) = 0.4740770
    # pair 1: βh = −1 → −log σ(−1) = log(1 + e^1) = log(3.7182818) = 1.3132617
    # mean = (0.4740770 + 1.3132617) / 2 = 0.8936693
    loss, metrics = _loss("sigmoid")
    assert loss.item() == pytest.approx(0.8936693, abs=1e-6)
    assert metrics["actor/dpo_loss"] == pytest.approx(0.8936693, abs=1e-6)


def test_sigmoid_label_smoothing_hand_computed():
    # ε = 0.1, pair 0: 0.9 · 0.4740770 + 0.1 · log(1 + e^0.5) = 0.4266693 + 0.1 · 0.9740770 = 0.5240770
    #          pair 1: 0.9 · 1.3132617 + 0.1 · log(1 + e^−1) = 1.1819355 + 0.1 · 0.3132617 = 1.2132617
    # mean = (0.5240770 + 1.2132617) / 2 = 0.8686693
    loss, _ = _loss("sigmoid", eps=0.1)
    assert loss.item() == pytest.approx(0.8686693, abs=1e-6)


def test_ipo_and_hinge_hand_computed():
    # IPO, 1/(2β) = 1: pair 0 (1 − 1)² = 0; pair 1 (−2 − 1)² = 9 → mean 4.5
    assert _loss("ipo")[0].item() == pytest.approx(4.5)
    # hinge: pair 0 max(0, 1 − 0.5·1) = 0.5; pair 1 max(0, 1 − 0.5·(−2)) = 2 → mean 1.25
    assert _loss("hinge")[0].item() == pytest.approx(1.25)


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge"])
@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_matches_naive_reference(loss_type, eps):
    assert _loss(loss_type, eps=eps)[0].item() == pytest.approx(_naive_loss(loss_type, BETA, eps), rel=1e-6)


def test_implicit_reward_metrics_hand_computed():
    # r_c = β(π_c − ref_c) = 0.5·[0.5, −2] = [0.25, −1];  r_r = 0.5·[−0.5, 0] = [−0.25, 0]
    # margins [0.5, −1] → mean −0.25; accuracy [1, 0] → 0.5; mean r_c = −0.375; mean r_r = −0.125; mean h = −0.5
    _, metrics = _loss("sigmoid")
    assert metrics["actor/rewards_chosen"] == pytest.approx(-0.375)
    assert metrics["actor/rewards_rejected"] == pytest.approx(-0.125)
    assert metrics["actor/reward_margin"] == pytest.approx(-0.25)
    assert metrics["actor/reward_accuracy"] == pytest.approx(0.5)
    assert metrics["actor/dpo_logits"] == pytest.approx(-0.5)


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge"])
def test_gradient_raises_chosen_and_lowers_rejected(loss_type):
    # pair 1 (h = −2) violates the preference under every loss; a descent step must push log π_c up, log π_r down
    chosen = POLICY_CHOSEN.clone().requires_grad_(True)
    rejected = POLICY_REJECTED.clone().requires_grad_(True)
    loss, _ = compute_dpo_loss(chosen, rejected, REF_CHOSEN, REF_REJECTED, BETA, loss_type)
    loss.backward()
    assert chosen.grad[1] < 0 and rejected.grad[1] > 0  # −grad is the descent direction
    assert torch.allclose(chosen.grad, -rejected.grad)  # the loss depends on the difference only


def test_pair_weights_and_num_pairs():
    # weight 0 on pair 1 → only pair 0 counts: sigmoid loss 0.4740770, accuracy 1
    loss, metrics = _loss("sigmoid", pair_weights=torch.tensor([1.0, 0.0]))
    assert loss.item() == pytest.approx(0.4740770, abs=1e-6)
    assert metrics["actor/reward_accuracy"] == 1.0
    # a data-parallel caller divides by its share of the global pairs instead: 0.4740770 / 4
    loss, _ = _loss("sigmoid", pair_weights=torch.tensor([1.0, 0.0]), num_pairs=4)
    assert loss.item() == pytest.approx(0.4740770 / 4, abs=1e-6)
    # only padding: zero loss, no metrics
    loss, metrics = _loss("sigmoid", pair_weights=torch.zeros(2), num_pairs=1)
    assert loss.item() == 0.0 and metrics == {}


def test_sequence_log_prob_and_split_pairs():
    token_log_probs = torch.tensor([[-1.0, -2.0, 99.0], [-0.5, -0.5, -0.5]])  # 99 sits under the mask
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    # row 0: −1 − 2 = −3; row 1: 3 · −0.5 = −1.5
    assert sequence_log_prob(token_log_probs, mask).tolist() == [-3.0, -1.5]
    chosen, rejected = split_pairs(torch.arange(6))
    assert chosen.tolist() == [0, 2, 4] and rejected.tolist() == [1, 3, 5]
    with pytest.raises(ValueError, match="even number of rows"):
        split_pairs(torch.arange(3))


def test_registry_and_errors():
    assert {"sigmoid", "ipo", "hinge"} <= set(DPO_LOSS_REGISTRY)
    with pytest.raises(ValueError, match="algorithm.dpo.loss_type='kto'.*hinge"):
        get_dpo_loss_fn("kto")
    with pytest.raises(ValueError, match="algorithm.dpo.beta"):
        compute_dpo_loss(POLICY_CHOSEN, POLICY_REJECTED, REF_CHOSEN, REF_REJECTED, 0.0)
    with pytest.raises(ValueError, match="label_smoothing"):
        compute_dpo_loss(POLICY_CHOSEN, POLICY_REJECTED, REF_CHOSEN, REF_REJECTED, 0.1, label_smoothing=0.5)
