"""hybridrl.models.transformers.packed_head: the CPU output head over a prepacked oneDNN fp32 weight.

Against ``F.linear`` on the same weight (within 1e-5: another summation order), a repack after every kind of weight
change (in-place update as the actor's weight sync does, a new Parameter), and every case that must keep the plain
path: autograd, a bias, a small vocabulary, someone else's instance-level ``forward``. Decode-level equality (tokens and log-probs of
a whole rollout) is in test_decode_equality_on_cpu.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hybridrl.models.transformers.packed_head import (
    MIN_PACKED_VOCAB,
    PackedLinearForward,
    packable_head,
    packed_output_head,
)

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")


class _TinyLM(nn.Module):
    """Just enough of an HF causal LM for the head lookup: ``get_output_embeddings``."""

    def __init__(self, vocab: int = 9000, hidden: int = 16, bias: bool = False, dtype=torch.float32) -> None:
        super().__init__()
        self.lm_head = nn.Linear(hidden, vocab, bias=bias, dtype=dtype)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head


def test_packed_product_equals_f_linear_for_2d_and_3d_inputs():
    torch.manual_seed(0)
    head = nn.Linear(64, 5000, bias=False)
    forward = PackedLinearForward(head)
    with torch.no_grad():
        for x in (torch.randn(7, 64), torch.randn(3, 2, 64), torch.randn(4, 5, 64)[:, -1:]):  # the last a view
            got = forward(x)
            assert got.shape == (*x.shape[:-1], 5000) and got.layout == torch.strided
            torch.testing.assert_close(got, nn.functional.linear(x, head.weight), atol=1e-5, rtol=0)


def test_the_packed_copy_follows_in_place_updates_and_new_parameters():
    torch.manual_seed(0)
    head = nn.Linear(32, 100, bias=False)
    forward = PackedLinearForward(head)
    x = torch.randn(4, 32)
    with torch.no_grad():
        before = forward(x)
        head.weight.mul_(2.0)  # the weight sync's copy_ bumps the version the same way
        torch.testing.assert_close(forward(x), 2.0 * before, atol=1e-5, rtol=0)
        head.weight = nn.Parameter(torch.zeros(100, 32))
        assert torch.equal(forward(x), torch.zeros(4, 100))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_head_gives_fp32_logits_of_its_weight(dtype):
    """A bf16 rollout's head: packed as an fp32 copy, fp32 logits (not rounded to bf16), of the bf16 values."""
    torch.manual_seed(0)
    model = _TinyLM(vocab=MIN_PACKED_VOCAB, hidden=64, dtype=dtype)
    x = torch.randn(5, 64).to(dtype)
    expected = nn.functional.linear(x.float(), model.lm_head.weight.float())
    with torch.no_grad(), packed_output_head(model) as packed:
        got = model.lm_head(x)
    assert packed and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert (got - nn.functional.linear(x, model.lm_head.weight).float()).abs().max() > 1e-4  # a half-precision output would round


def test_under_autograd_the_plain_product_runs():
    head = nn.Linear(8, 20, bias=False)
    forward = PackedLinearForward(head)
    x = torch.randn(2, 8, requires_grad=True)
    out = forward(x)  # grad enabled: the plain product, so the backward works
    out.sum().backward()
    assert x.grad is not None and forward._packed is None


def test_the_context_swaps_the_head_forward_and_restores_it():
    model = _TinyLM()
    x = torch.randn(3, 16)
    with torch.no_grad():
        expected = model.lm_head(x)
        with packed_output_head(model) as packed:
            assert packed and isinstance(model.lm_head.forward, PackedLinearForward)
            torch.testing.assert_close(model.lm_head(x), expected, atol=1e-5, rtol=0)
        assert "forward" not in model.lm_head.__dict__  # nn.Linear.forward again
        with packed_output_head(model, enabled=False) as packed:
            assert not packed and "forward" not in model.lm_head.__dict__


@pytest.mark.parametrize(
    "model",
    [_TinyLM(bias=True), _TinyLM(vocab=MIN_PACKED_VOCAB - 1), _TinyLM(dtype=torch.float64), nn.Linear(4, 4)],
    ids=["bias", "small_vocab", "fp64", "no_get_output_embeddings"],
)
def test_heads_the_packed_path_does_not_apply_to(model):
    assert packable_head(model) is None
    with packed_output_head(model) as packed:
        assert not packed


def test_someone_elses_instance_forward_is_left_alone():
    model = _TinyLM()
    hook = lambda x: x  # noqa: E731  (a stand-in for an accelerate-style hook)
    model.lm_head.forward = hook
    with packed_output_head(model) as packed:
        assert not packed and model.lm_head.forward is hook
    assert model.lm_head.forward is hook
