"""Distillation losses (``hybridrl.algos.distillation``) on small tensors, the arithmetic in comments."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.algos.aggregation import agg_loss
from hybridrl.algos.distillation import (
    ESTIMATOR_LOSS_MODES,
    combine_with_task_loss,
    distillation_loss,
    forward_kl_topk,
    reverse_kl_estimate,
    student_topk_log_probs,
)

# one sample, three response tokens, the last one padding
STUDENT = torch.tensor([[math.log(0.5), math.log(0.25), math.log(0.9)]])
TEACHER = torch.tensor([[math.log(0.25), math.log(0.5), math.log(0.1)]])
MASK = torch.tensor([[1, 1, 0]])


def test_k1_is_the_log_ratio():
    # δ = log q − log p: log 2, −log 2, log 9
    expected = torch.tensor([[math.log(2), -math.log(2), math.log(9)]])
    torch.testing.assert_close(reverse_kl_estimate(STUDENT, TEACHER, "k1"), expected)


def test_k3_hand_computed():
    # k3 = e^{−δ} + δ − 1: δ = log 2 → ½ + log 2 − 1 = 0.1931; δ = −log 2 → 2 − log 2 − 1 = 0.3069
    k3 = reverse_kl_estimate(STUDENT, TEACHER, "k3")
    torch.testing.assert_close(k3[0, :2], torch.tensor([0.5 + math.log(2) - 1, 2 - math.log(2) - 1]))


@pytest.mark.parametrize("mode", ESTIMATOR_LOSS_MODES)
def test_teacher_equal_to_student_gives_zero_loss_and_zero_gradient(mode):
    student = STUDENT.clone().requires_grad_(True)
    per_token = reverse_kl_estimate(student, STUDENT, mode)
    assert torch.equal(per_token, torch.zeros_like(per_token))
    loss, metrics = distillation_loss(per_token, MASK, "token-mean")
    loss.backward()
    assert loss.item() == 0.0 and metrics["distillation/loss_max"] == 0.0
    if mode in ("k1", "kl"):  # dδ/dlog q = 1 whatever the teacher: why a supervised k1 loss is refused (as verl)
        return
    assert torch.equal(student.grad, torch.zeros_like(student.grad))


def test_teacher_equal_to_student_gives_zero_policy_gradient_signal():
    # advantages −ℓ = 0 everywhere: the PPO loss and its gradient are 0
    log_prob = STUDENT.clone().requires_grad_(True)
    per_token = reverse_kl_estimate(log_prob.detach(), STUDENT, "k1")
    loss, metrics = distillation_loss(per_token, MASK, "token-mean", use_policy_gradient=True,
                                      log_prob=log_prob, old_log_prob=STUDENT)
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(log_prob.grad, torch.zeros_like(log_prob.grad))
    assert metrics["distillation/pg_clipfrac"] == 0.0 and "distillation/ppo_kl" in metrics


def test_supervised_loss_is_the_masked_mean_and_clamp_applies_after_the_range_metrics():
    per_token = reverse_kl_estimate(STUDENT, TEACHER, "k1")  # [log 2, −log 2, (log 9 masked)]
    loss, metrics = distillation_loss(per_token, MASK, "token-mean")
    assert loss.item() == pytest.approx(0.0, abs=1e-7)  # (log 2 − log 2) / 2
    assert metrics["distillation/loss_min"] == pytest.approx(-math.log(2))
    assert metrics["distillation/loss_max"] == pytest.approx(math.log(2))
    big = torch.tensor([[5.0, -1.0, 0.0]])
    clamped, clamped_metrics = distillation_loss(big, MASK, "token-mean", loss_max_clamp=2.0)
    assert clamped.item() == pytest.approx((2.0 - 1.0) / 2)  # 5 → 2
    assert clamped_metrics["distillation/loss_max"] == 5.0  # measured before the clamp, as verl


def test_policy_gradient_mode_uses_minus_loss_as_advantage_with_the_clip():
    # on-policy (ratio 1): L = mean_m(−A · 1) = mean_m(ℓ) = (log 2 − log 2)/2 = 0 with k1; with ℓ = [1, 3]:
    # L = (1 + 3) / 2 = 2 and dL/dlog q_t = ℓ_t / 2 (ratio' = ratio = 1)
    per_token = torch.tensor([[1.0, 3.0, 7.0]])
    log_prob = torch.zeros(1, 3, requires_grad=True)
    loss, _ = distillation_loss(per_token, MASK, "token-mean", use_policy_gradient=True,
                                log_prob=log_prob, old_log_prob=torch.zeros(1, 3))
    loss.backward()
    assert loss.item() == pytest.approx(2.0)
    torch.testing.assert_close(log_prob.grad, torch.tensor([[0.5, 1.5, 0.0]]))
    # off-policy beyond the clip: ratio e^{0.5} > 1.2 with A < 0 keeps the unclipped (larger) loss, clipfrac 0;
    # ratio e^{-0.5} < 0.8 with A < 0: −A·0.8 > −A·e^{-0.5}, so the clipped term wins: clipfrac ½
    log_prob = torch.tensor([[0.5, -0.5, 0.0]])
    _, metrics = distillation_loss(per_token, MASK, "token-mean", use_policy_gradient=True,
                                   log_prob=log_prob, old_log_prob=torch.zeros(1, 3),
                                   clip_ratio_low=0.2, clip_ratio_high=0.2)
    assert metrics["distillation/pg_clipfrac"] == pytest.approx(0.5)


def test_forward_kl_topk_hand_computed():
    # teacher top-2 p = (0.5, 0.25), student q at those ids = (0.25, 0.25):
    # KL = 0.5 (log 0.5 − log 0.25) + 0.25 (log 0.25 − log 0.25) = 0.5 log 2
    teacher = torch.log(torch.tensor([[[0.5, 0.25]]]))
    student = torch.log(torch.tensor([[[0.25, 0.25]]]))
    kl, student_mass, teacher_mass = forward_kl_topk(student, teacher)
    torch.testing.assert_close(kl, torch.tensor([[0.5 * math.log(2)]]))
    torch.testing.assert_close(student_mass, torch.tensor([[0.5]]))
    torch.testing.assert_close(teacher_mass, torch.tensor([[0.75]]))
    # the sum over a truncated support can be negative (q > p on it): clamped at 0
    kl_negative, _, _ = forward_kl_topk(teacher, student)
    assert kl_negative.item() == 0.0  # 0.25 (log .25 − log .5) + 0.25·0 < 0


def test_forward_kl_topk_log_prob_min_clamp():
    # q = e^{−30} clamped to e^{−5}: KL = 1 · (0 − (−5)) = 5
    kl, _, _ = forward_kl_topk(torch.tensor([[[-30.0]]]), torch.tensor([[[0.0]]]), log_prob_min_clamp=-5.0)
    assert kl.item() == pytest.approx(5.0)


@pytest.mark.parametrize("k", [4, 11])
def test_forward_kl_topk_teacher_equal_to_student_is_zero(k):
    """The loss is 0 for any k; its gradient is 0 when k covers the vocabulary (with k < V the truncated sum
    −Σ_{top-k} p log q still pulls mass into the top-k ids, as in verl)."""
    logits = torch.randn(2, 3, 11, requires_grad=True)
    teacher_log_probs = torch.log_softmax(logits.detach(), dim=-1)
    teacher_topk, teacher_ids = torch.topk(teacher_log_probs, k=k, dim=-1)
    student, student_ids = student_topk_log_probs(logits, teacher_ids)
    assert torch.equal(student_ids, teacher_ids)
    kl, _, _ = forward_kl_topk(student, teacher_topk)
    torch.testing.assert_close(kl, torch.zeros(2, 3), atol=1e-6, rtol=0)
    loss, _ = distillation_loss(kl, torch.ones(2, 3), "token-mean")
    loss.backward()
    if k < 11:
        return
    torch.testing.assert_close(logits.grad, torch.zeros_like(logits.grad), atol=1e-6, rtol=0)


def test_student_topk_log_probs_equals_log_softmax_gather():
    logits = torch.randn(2, 3, 7)
    ids = torch.tensor([[[0, 6]] * 3] * 2)
    gathered, _ = student_topk_log_probs(logits, ids)
    torch.testing.assert_close(gathered, torch.gather(torch.log_softmax(logits, -1), -1, ids))


def test_combine_with_task_loss():
    task, distill = torch.tensor(2.0), torch.tensor(3.0)
    assert combine_with_task_loss(task, distill, True, 0.5).item() == 3.5  # 2 + 0.5·3
    assert combine_with_task_loss(task, distill, False, 0.5).item() == 3.0  # the task loss dropped, coef unused


def test_supervised_aggregation_follows_loss_agg_mode():
    per_token = torch.tensor([[1.0, 3.0, 0.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss, _ = distillation_loss(per_token, mask, "seq-mean-token-mean")
    assert loss.item() == pytest.approx((2.0 + 2.0) / 2)  # rows: (1+3)/2, 2/1
    assert loss.item() == agg_loss(per_token, mask, "seq-mean-token-mean").item()


def test_unknown_loss_mode_names_the_key():
    with pytest.raises(ValueError, match="distillation.distillation_loss.loss_mode"):
        reverse_kl_estimate(STUDENT, TEACHER, "k9")
