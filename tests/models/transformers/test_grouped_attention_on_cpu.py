"""The grouped-matmul attention kernel against SDPA, and when hybridrl_varlen routes a call to it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hybridrl.models.transformers import varlen_attention
from hybridrl.models.transformers.grouped_attention import additive_mask, grouped_attention


def _qkv(batch=2, heads=6, kv_heads=2, queries=5, keys=9, dim=8, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, h, n, dim, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()
            for h, n in ((heads, queries), (kv_heads, keys), (kv_heads, keys))]


def _padded_causal_mask(batch, queries, keys, pads):
    """Bottom-right causal mask with ``pads[b]`` left-padding keys per row: ``[B, 1, Q, K]`` bool."""
    key_pos = torch.arange(keys)[None, None, :]
    query_pos = torch.arange(queries)[None, :, None] + keys - queries
    return ((key_pos <= query_pos) & (key_pos >= torch.tensor(pads)[:, None, None]))[:, None]


def _sdpa(q, k, v, mask=None, is_causal=False, scale=None):
    group = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                          attn_mask=mask, is_causal=is_causal, scale=scale)


def _grouped(q, k, v, mask, scale, is_causal=False):
    bias, live = additive_mask(mask, q.shape[2], k.shape[2], is_causal, q.device)
    return grouped_attention(q, k, v, bias, scale, live)


def _out_and_grads(out, inputs):
    weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape)
    return out.detach(), torch.autograd.grad((out.double() * weights).sum(), inputs)


@pytest.mark.parametrize("case", ["bool_mask_gqa", "causal_none", "float_mask", "no_mask_mha"])
def test_outputs_and_gradients_equal_sdpa(case):
    """float64 inputs (the kernel computes in float32): outputs and q/k/v gradients within float32 rounding."""
    if case == "no_mask_mha":
        q, k, v = _qkv(heads=3, kv_heads=3)
        mask, causal = None, False
    else:
        q, k, v = _qkv()
        causal = case == "causal_none"
        mask = None if causal else _padded_causal_mask(2, 5, 9, [0, 3])
        if case == "float_mask":
            mask = torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, -1e4) + 0.1 * torch.arange(9)
    expected = _out_and_grads(_sdpa(q, k, v, mask, causal, scale=0.3), (q, k, v))
    got = _out_and_grads(_grouped(q, k, v, mask, 0.3, causal), (q, k, v))
    assert got[0].dtype == torch.float64
    torch.testing.assert_close(got[0], expected[0], rtol=0, atol=1e-6)
    for got_grad, expected_grad in zip(got[1], expected[1]):
        torch.testing.assert_close(got_grad, expected_grad, rtol=0, atol=2e-6)


def test_fully_masked_rows_give_zero_output_and_no_gradient_like_sdpa():
    q, k, v = _qkv(queries=4, keys=4)
    mask = _padded_causal_mask(2, 4, 4, [2, 0])  # row 0: queries 0 and 1 see only padding keys
    assert not bool(mask[0, 0, :2].any())
    expected = _out_and_grads(_sdpa(q, k, v, mask), (q, k, v))
    got = _out_and_grads(_grouped(q, k, v, mask, 8 ** -0.5), (q, k, v))
    assert bool((got[0][0, :, :2] == 0).all())
    torch.testing.assert_close(got[0], expected[0], rtol=0, atol=1e-6)
    for got_grad, expected_grad in zip(got[1], expected[1]):
        torch.testing.assert_close(got_grad, expected_grad, rtol=0, atol=2e-6)


def test_bf16_inputs_are_at_least_as_close_to_float64_as_the_bf16_kernel():
    q64, k64, v64 = _qkv(batch=4, queries=40, keys=60, dim=16, seed=3)
    mask = _padded_causal_mask(4, 40, 60, [0, 5, 11, 20])
    reference = _out_and_grads(_sdpa(q64, k64, v64, mask), (q64, k64, v64))
    q, k, v = (t.detach().bfloat16().requires_grad_() for t in (q64, k64, v64))
    native = _out_and_grads(_sdpa(q, k, v, mask), (q, k, v))
    got = _out_and_grads(_grouped(q, k, v, mask, 0.25), (q, k, v))
    assert got[0].dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in got[1])
    error = lambda a, b: (a.double() - b).abs().max().item()  # noqa: E731
    assert error(got[0], reference[0]) <= error(native[0], reference[0])
    for got_grad, native_grad, ref_grad in zip(got[1], native[1], reference[1]):
        assert error(got_grad, ref_grad) <= error(native_grad, ref_grad) * 1.05


class _Attention(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


def _routed(monkeypatch):
    calls = []
    kernel = varlen_attention.grouped_attention
    monkeypatch.setattr(varlen_attention, "grouped_attention", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    return calls


def test_differentiated_cpu_calls_take_the_grouped_kernel_with_sdpa_numbers(monkeypatch):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    calls = _routed(monkeypatch)
    q, k, v = _qkv(dtype=torch.float32)
    mask = _padded_causal_mask(2, 5, 9, [0, 3])
    got = varlen_attention.sdpa_forward(_Attention(), q, k, v, mask, scaling=0.3)[0]
    assert calls == [1]
    expected = sdpa_attention_forward(_Attention(), q, k, v, mask, scaling=0.3)[0]
    assert got.shape == expected.shape == (2, 5, 6, 8)  # [B, Q, H, D] as transformers returns it
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    # a packed row: each sequence's causal call
    row = varlen_attention.varlen_causal_attention(q[:1], k[:1, :, :5], v[:1, :, :5], [0, 2, 5], scaling=0.3)
    assert calls == [1, 1, 1]
    torch.testing.assert_close(row[:, :, 2:], _sdpa(q[:1, :, 2:], k[:1, :, 2:5], v[:1, :, 2:5], is_causal=True,
                                                    scale=0.3), rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", ["no_grad", "too_many_queries", "one_query", "dropout", "softcap", "switched_off"])
def test_other_calls_keep_sdpa_exactly(monkeypatch, case):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    calls = _routed(monkeypatch)
    queries = {"too_many_queries": varlen_attention.GROUPED_MAX_QUERY + 1, "one_query": 1}.get(case, 5)
    q, k, v = _qkv(queries=queries, keys=queries + 4, dtype=torch.float32)
    mask = _padded_causal_mask(2, queries, queries + 4, [0, 3])
    kwargs = {"dropout": {"dropout": 0.5}, "softcap": {"softcap": 30.0}}.get(case, {})
    if case == "switched_off":
        monkeypatch.setattr(varlen_attention, "GROUPED_MAX_QUERY", 0)
    if case == "softcap":  # transformers' SDPA refuses softcap itself: the call must reach it
        with pytest.raises(ValueError, match="softcap"):
            varlen_attention.sdpa_forward(_Attention(), q, k, v, mask, **kwargs)
        assert calls == []
        return
    with torch.set_grad_enabled(case != "no_grad"):
        torch.manual_seed(0)
        got = varlen_attention.sdpa_forward(_Attention(), q, k, v, mask, **kwargs)[0]
        torch.manual_seed(0)
        expected = sdpa_attention_forward(_Attention(), q, k, v, mask, **kwargs)[0]
    assert calls == []
    assert torch.equal(got, expected)
