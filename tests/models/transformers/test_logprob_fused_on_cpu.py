"""token_logprobs / token_sum_pi_squared: the blocked log-prob forward/backward and Σπ² against the unfused torch ops
they replace."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hybridrl.models.transformers import logprob_fused
from hybridrl.models.transformers.logprob_fused import token_logprobs, token_sum_pi_squared


def _reference(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """The actor's path before: fp32 copy, divide, log-softmax, gather."""
    scaled = logits.float() / temperature
    return torch.gather(F.log_softmax(scaled, dim=-1), -1, labels.unsqueeze(-1)).squeeze(-1)


def _values_and_grads(fn, logits, labels, temperature, grad_out):
    leaf = logits.detach().clone().requires_grad_(True)
    out = fn(leaf, labels, temperature)
    out.backward(grad_out)
    return out.detach(), leaf.grad


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 2 rows at V = 50: every call below runs several blocks and a ragged last one."""
    monkeypatch.setattr(logprob_fused, "_BLOCK_ELEMENTS", 100)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_fp32_values_and_gradients_equal_the_unfused_ops(small_blocks, temperature):
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 50) * 4  # [B, T, V]: 15 rows in blocks of 2
    labels = torch.randint(0, 50, (3, 5))
    grad_out = torch.randn(3, 5)
    out, grad = _values_and_grads(token_logprobs, logits, labels, temperature, grad_out)
    ref_out, ref_grad = _values_and_grads(_reference, logits, labels, temperature, grad_out)
    assert out.shape == (3, 5) and out.dtype == torch.float32
    torch.testing.assert_close(out, ref_out, rtol=0, atol=2e-6)
    torch.testing.assert_close(grad, ref_grad, rtol=0, atol=2e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_bf16_logits_get_fp32_values_and_bf16_gradients_of_the_unfused_ops(small_blocks, temperature):
    torch.manual_seed(1)
    logits = (torch.randn(4, 6, 50) * 8).bfloat16()
    labels = torch.randint(0, 50, (4, 6))
    grad_out = torch.randn(4, 6)
    out, grad = _values_and_grads(token_logprobs, logits, labels, temperature, grad_out)
    ref_out, ref_grad = _values_and_grads(_reference, logits, labels, temperature, grad_out)
    assert out.dtype == torch.float32 and grad.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-5)
    # both compute the fp32 gradient and round it to bf16 once; float order may flip a last bit
    torch.testing.assert_close(grad.float(), ref_grad.float(), rtol=2 ** -7, atol=1e-6)


def test_gradient_is_exact_in_float64():
    torch.manual_seed(2)
    logits = torch.randn(7, 11, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 11, (7,))
    # float64 in, float32 out: check the math on a float64 re-implementation of the same backward
    out = token_logprobs(logits, labels, 0.8)
    grad_out = torch.randn(7, dtype=torch.float32)
    (grad,) = torch.autograd.grad(out, logits, grad_out)
    probs = torch.softmax(logits.detach() / 0.8, dim=-1)
    expected = (F.one_hot(labels, 11).double() - probs) * grad_out.double()[:, None] / 0.8
    torch.testing.assert_close(grad, expected, rtol=0, atol=1e-6)


def test_labels_at_the_vocabulary_edges_and_one_row_blocks(monkeypatch):
    monkeypatch.setattr(logprob_fused, "_BLOCK_ELEMENTS", 1)  # fewer elements than V: one row per block
    logits = torch.tensor([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5]])
    labels = torch.tensor([0, 2])
    out = token_logprobs(logits, labels)
    torch.testing.assert_close(out, _reference(logits, labels, 1.0), rtol=0, atol=1e-7)


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_non_positive_temperature_is_refused(temperature):
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), temperature)
    with pytest.raises(ValueError, match="temperature"):
        token_sum_pi_squared(torch.zeros(2, 3), temperature)


def test_sum_pi_squared_hand_computed(monkeypatch):
    monkeypatch.setattr(logprob_fused, "_BLOCK_ELEMENTS", 1)  # one row per block
    # logits (0, ln 3): π = (1/4, 3/4) → Σπ² = 1/16 + 9/16 = 0.625
    # at τ = 0.5 the logits are (0, 2 ln 3): π = (1/10, 9/10) → Σπ² = 0.01 + 0.81 = 0.82
    # uniform over 4: Σπ² = 4 · 1/16 = 0.25 at any τ; shifted by 1000: no overflow (exp(2000) would)
    logits = torch.tensor(
        [
            [0.0, math.log(3.0), -math.inf, -math.inf],
            [1.0, 1.0, 1.0, 1.0],
            [1000.0, 1000.0 + math.log(3.0), -math.inf, -math.inf],
        ]
    )
    assert token_sum_pi_squared(logits).tolist() == pytest.approx([0.625, 0.25, 0.625], abs=1e-4)
    assert token_sum_pi_squared(logits, 0.5).tolist() == pytest.approx([0.82, 0.25, 0.82], abs=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sum_pi_squared_equals_the_unfused_softmax(small_blocks, dtype):
    torch.manual_seed(3)
    logits = (torch.randn(3, 5, 50) * 4).to(dtype)  # [B, T, V]: 15 rows in blocks of 2
    out = token_sum_pi_squared(logits, 0.7)
    expected = torch.softmax(logits.float() / 0.7, dim=-1).pow(2).sum(-1)
    assert out.shape == (3, 5) and out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
