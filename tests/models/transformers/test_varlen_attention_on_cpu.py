"""Varlen attention (hybridrl.models.transformers.varlen_attention): packed rows without the dense nnz × nnz mask.

Three layouts of the same batch must agree on every valid response token, in log-probs and in gradients:
padded (``sdpa``, a ``[B, 1, S, S]`` mask), packed with the dense block-diagonal mask (``sdpa``: the path before
varlen) and packed varlen (``hybridrl_varlen``). Tolerance 1e-5 (fp32; the kernels sum in different orders).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch

from hybridrl.models.transformers import varlen_attention
from hybridrl.utils import ulysses
from hybridrl.utils.torch_functional import compute_position_id_with_mask, logprobs_from_logits
from hybridrl.workers.actor.forward import forward_response
from hybridrl.workers.engine.model_loader import load_hf_model

SMOLLM2_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hybridrl" / "smollm2-135m-instruct"
PROMPT_LEN, RESPONSE_LEN = 7, 5


def test_packed_sequence_bounds_by_hand():
    # sequences [0 1 2] [0 1] [0]: each restart of the positions opens a sequence
    assert varlen_attention.packed_sequence_bounds(torch.tensor([0, 1, 2, 0, 1, 0])) == [0, 3, 5, 6]
    assert varlen_attention.packed_sequence_bounds(torch.tensor([3, 4, 5])) == [0, 3]  # one sequence, any start
    assert varlen_attention.packed_sequence_bounds(torch.tensor([0, 0, 0])) == [0, 1, 2, 3]


def test_varlen_attention_equals_dense_block_mask_with_gqa_and_length_one():
    """Per-sequence SDPA == one SDPA over the row with the block-diagonal causal mask, outputs and gradients."""
    gen = torch.Generator().manual_seed(0)
    positions = torch.tensor([0, 1, 2, 3, 0, 0, 1, 0, 1, 2])  # lengths 4, 1, 2, 3
    q = torch.randn(1, 4, 10, 8, generator=gen, requires_grad=True)
    k = torch.randn(1, 2, 10, 8, generator=gen, requires_grad=True)  # 2 query heads per key-value head
    v = torch.randn(1, 2, 10, 8, generator=gen, requires_grad=True)
    weights = torch.randn(1, 4, 10, 8, generator=gen)

    def run(attend):
        out = attend()
        grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
        return out.detach(), grads

    bounds = varlen_attention.packed_sequence_bounds(positions)
    varlen = run(lambda: varlen_attention.varlen_causal_attention(q, k, v, bounds, scaling=0.3))
    mask = ulysses.packed_causal_mask(positions)[None, None]
    dense = run(lambda: torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask, scale=0.3))
    torch.testing.assert_close(varlen[0], dense[0], rtol=1e-6, atol=1e-6)
    for got, expected in zip(varlen[1], dense[1]):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # the length-1 sequence at position 4 attends only to itself: its output is its value vector
    torch.testing.assert_close(varlen[0][0, :, 4], v[0, :, 4].detach().repeat_interleave(2, 0))


class _Attention(torch.nn.Module):
    num_key_value_groups = 2  # 4 query heads over 2 key-value heads
    is_causal = True


def _half_qkv(queries: int, keys: int, dtype: torch.dtype = torch.bfloat16):
    """``q [2, 4, Q, 16]``, ``k, v [2, 2, K, 16]`` (leaves, gradients on) and a causal mask with left padding."""
    gen = torch.Generator().manual_seed(queries)
    q, k, v = (torch.randn(2, heads, length, 16, generator=gen).to(dtype).requires_grad_()
               for heads, length in ((4, queries), (2, keys), (2, keys)))
    mask = torch.ones(2, 1, queries, keys, dtype=torch.bool).tril(diagonal=keys - queries)
    mask[1, :, :, :3] = False
    return q, k, v, mask


def _out_and_grads(attend, q, k, v):
    out = attend(q, k, v)
    weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    return out.detach(), torch.autograd.grad((out.float() * weights).sum(), (q, k, v))


def test_short_half_calls_run_sdpa_on_fp32_copies_forward_and_backward(monkeypatch):
    """bf16, Q <= UPCAST_MAX_QUERY, grouped kernel off: exactly transformers' SDPA on fp32 copies cast back,
    outputs and gradients."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    monkeypatch.setattr(varlen_attention, "GROUPED_MAX_QUERY", 0)
    q, k, v, mask = _half_qkv(queries=varlen_attention.UPCAST_MAX_QUERY, keys=70)
    assert varlen_attention.half_sdpa_in_fp32(q)
    got = _out_and_grads(lambda *t: varlen_attention.sdpa_forward(_Attention(), *t, mask, scaling=0.25)[0], q, k, v)
    fp32 = [t.detach().float().requires_grad_() for t in (q, k, v)]
    expected = _out_and_grads(
        lambda *t: sdpa_attention_forward(_Attention(), *t, mask, scaling=0.25)[0].to(torch.bfloat16), *fp32)
    assert got[0].dtype == torch.bfloat16 and torch.equal(got[0], expected[0])
    for got_grad, expected_grad in zip(got[1], expected[1]):
        assert got_grad.dtype == torch.bfloat16 and torch.equal(got_grad, expected_grad.to(torch.bfloat16))
    # and at least as close to float64 attention as the bf16 kernel
    reference = sdpa_attention_forward(_Attention(), *(t.detach().double() for t in (q, k, v)), mask,
                                       scaling=0.25)[0]
    native = sdpa_attention_forward(_Attention(), q.detach(), k.detach(), v.detach(), mask, scaling=0.25)[0]
    assert (got[0].double() - reference).abs().max() <= (native.double() - reference).abs().max()


def test_long_half_calls_and_fp32_calls_keep_the_plain_kernel(monkeypatch):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    monkeypatch.setattr(varlen_attention, "GROUPED_MAX_QUERY", 0)
    for queries, dtype in ((varlen_attention.UPCAST_MAX_QUERY + 1, torch.bfloat16), (8, torch.float32)):
        q, k, v, mask = _half_qkv(queries=queries, keys=queries + 4, dtype=dtype)
        assert not varlen_attention.half_sdpa_in_fp32(q)
        got = varlen_attention.sdpa_forward(_Attention(), q, k, v, mask)[0]
        assert got.dtype == dtype and torch.equal(got, sdpa_attention_forward(_Attention(), q, k, v, mask)[0])


def test_packed_half_row_upcasts_each_short_sequence_only():
    """A bf16 packed row of a 5-token and a 70-token sequence: the short one in fp32, the long one in bf16
    (no gradients: the grouped kernel is for differentiated calls)."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 75, 16, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(1, 2, 75, 16, generator=gen).to(torch.bfloat16) for _ in range(2))
    got = varlen_attention.varlen_causal_attention(q, k, v, [0, 5, 75], scaling=0.25)

    def causal(q_, k_, v_):
        return torch.nn.functional.scaled_dot_product_attention(q_, k_, v_, is_causal=True, scale=0.25,
                                                                enable_gqa=True)

    short = causal(q[:, :, :5].float(), k[:, :, :5].float(), v[:, :, :5].float()).to(torch.bfloat16)
    long = causal(q[:, :, 5:], k[:, :, 5:], v[:, :, 5:])
    assert torch.equal(got, torch.cat([short, long], dim=2))


def _batch(vocab: int) -> dict[str, torch.Tensor]:
    """4 rows, left-padded prompts [4, 7] + right-padded responses [4, 5]; one response of length 1 and one
    prompt of length 1, so the packed row holds short and long sequences."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (4, PROMPT_LEN + RESPONSE_LEN), generator=gen)
    mask = torch.zeros_like(ids)
    for row, (p_len, r_len) in enumerate([(7, 5), (3, 1), (1, 4), (5, 2)]):
        mask[row, PROMPT_LEN - p_len : PROMPT_LEN + r_len] = 1
    ids = ids * mask
    return {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask),
            "responses": ids[:, PROMPT_LEN:], "response_mask": mask[:, PROMPT_LEN:]}


def _log_probs_and_grads(model, batch, use_remove_padding):
    """Response log-probs [4, 5] and the gradients of a weighted sum of them (what a policy loss does)."""
    model.zero_grad()
    (log_probs,) = forward_response(model, batch, use_remove_padding, lambda lg, nt: [logprobs_from_logits(lg, nt)])
    weights = torch.linspace(-1.0, 1.0, log_probs.numel()).view_as(log_probs) * batch["response_mask"]
    (log_probs * weights).sum().backward()
    return log_probs.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _assert_same(a, b, mask, grad_tol=1e-5):
    """Log-probs within 1e-5; each gradient tensor within ``grad_tol`` × its largest entry (+ rtol 1e-4)."""
    torch.testing.assert_close(a[0][mask], b[0][mask], rtol=1e-5, atol=1e-5)
    assert a[1].keys() == b[1].keys()
    for name, grad in a[1].items():
        scale = max(1.0, grad.abs().max().item())
        torch.testing.assert_close(b[1][name], grad, rtol=1e-4, atol=grad_tol * scale, msg=name)


def _three_layouts(model_dir: str, monkeypatch, grad_tol: float = 1e-5) -> None:
    sdpa, _ = load_hf_model(model_dir, attn_implementation="sdpa")
    varlen, _ = load_hf_model(model_dir)  # no implementation asked for: sdpa becomes hybridrl_varlen
    assert sdpa.config._attn_implementation == "sdpa"
    assert varlen.config._attn_implementation == varlen_attention.VARLEN_ATTN
    batch = _batch(sdpa.config.vocab_size)
    mask = batch["response_mask"].bool()
    padded = _log_probs_and_grads(sdpa, batch, use_remove_padding=False)
    dense_packed = _log_probs_and_grads(sdpa, batch, use_remove_padding=True)
    varlen_packed = _spied(monkeypatch, lambda: _log_probs_and_grads(varlen, batch, use_remove_padding=True),
                           expected_calls=varlen.config.num_hidden_layers)
    _assert_same(padded, varlen_packed, mask, grad_tol)
    _assert_same(dense_packed, varlen_packed, mask, grad_tol)
    assert bool((padded[0][mask] < 0).all())  # real log-probs on every valid token
    # the varlen model's padded forward, differentiated, runs the grouped kernel: SDPA's numbers up to float order
    _assert_same(padded, _log_probs_and_grads(varlen, batch, use_remove_padding=False), mask, grad_tol)
    # with the grouped kernel off it is plain SDPA: the same numbers as the sdpa model's
    monkeypatch.setattr(varlen_attention, "GROUPED_MAX_QUERY", 0)
    _assert_same(padded, _log_probs_and_grads(varlen, batch, use_remove_padding=False), mask, grad_tol=1e-7)
    monkeypatch.undo()


def _spied(monkeypatch, run, expected_calls):
    """``run()`` while counting varlen kernel calls and refusing any dense mask; returns its result."""
    from transformers import masking_utils

    calls = []
    kernel = varlen_attention.varlen_causal_attention
    monkeypatch.setattr(varlen_attention, "varlen_causal_attention", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    monkeypatch.setattr(masking_utils, "sdpa_mask", lambda *a, **k: pytest.fail("a dense mask was built"))
    result = run()
    monkeypatch.undo()
    assert len(calls) == expected_calls  # one per layer: the packed row went through the varlen kernel
    return result


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_varlen_packed_equals_padded_and_dense_packed(arch, tiny_model_dir, tiny_llama_dir, monkeypatch):
    _three_layouts(tiny_model_dir if arch == "qwen2" else tiny_llama_dir, monkeypatch)


@pytest.mark.slow
def test_varlen_packed_equals_padded_on_smollm2(monkeypatch):
    if not (SMOLLM2_DIR / "config.json").exists():
        pytest.skip(f"SmolLM2-135M-Instruct not prepared at {SMOLLM2_DIR}: run examples/quickstart/prepare_model.py")
    # 30 layers and RMSNorm weight gradients up to ~20: fp32 sums in another order differ by ≤ 3e-5 of the largest
    _three_layouts(str(SMOLLM2_DIR), monkeypatch, grad_tol=1e-4)


def test_varlen_packed_with_gradient_checkpointing_equals_without(tiny_model_dir, monkeypatch):
    """The recomputation in backward (the workers' default) runs the varlen kernel again: same gradients."""
    from hybridrl.workers.engine.fsdp import enable_gradient_checkpointing

    plain, _ = load_hf_model(tiny_model_dir)
    checkpointed = copy.deepcopy(plain)
    enable_gradient_checkpointing(checkpointed)
    plain.train(), checkpointed.train()
    batch = _batch(plain.config.vocab_size)
    layers = plain.config.num_hidden_layers
    expected = _log_probs_and_grads(plain, batch, use_remove_padding=True)
    recomputed = _spied(monkeypatch, lambda: _log_probs_and_grads(checkpointed, batch, use_remove_padding=True),
                        expected_calls=2 * layers)  # forward + recomputation in backward
    _assert_same(expected, recomputed, batch["response_mask"].bool(), grad_tol=1e-7)


def test_critic_value_model_packed_values_equal_padded(tiny_model_dir):
    """The critic's token-classification model switches too; packed values equal padded ones."""
    values_of = lambda logits, _next: [logits.squeeze(-1)]  # noqa: E731  (values [N, T] from logits [N, T, 1])
    model, _ = load_hf_model(tiny_model_dir, kind="token_classification")
    assert model.config._attn_implementation == varlen_attention.VARLEN_ATTN
    batch = _batch(model.config.vocab_size)
    mask = batch["response_mask"].bool()
    with torch.no_grad():
        (padded,) = forward_response(model, batch, False, values_of)
        (packed,) = forward_response(model, batch, True, values_of)
    torch.testing.assert_close(packed[mask], padded[mask], rtol=1e-5, atol=1e-5)


def test_explicit_attention_is_kept_and_saved_config_names_no_custom_attention(tiny_model_dir, tmp_path):
    eager, _ = load_hf_model(tiny_model_dir, attn_implementation="eager")
    assert eager.config._attn_implementation == "eager"
    varlen, config = load_hf_model(tiny_model_dir)
    config.save_pretrained(tmp_path)
    assert varlen_attention.VARLEN_ATTN not in (tmp_path / "config.json").read_text()


def test_generation_with_cache_and_left_padding_is_unchanged(tiny_model_dir):
    """Generation (a padding mask, a KV cache) takes SDPA's mask path: the same tokens as the sdpa model."""
    sdpa, _ = load_hf_model(tiny_model_dir, attn_implementation="sdpa")
    varlen = copy.deepcopy(sdpa)
    assert varlen_attention.use_varlen_attention(varlen)
    batch = _batch(sdpa.config.vocab_size)
    prompt, prompt_mask = batch["input_ids"][:, :PROMPT_LEN], batch["attention_mask"][:, :PROMPT_LEN]
    kwargs = {"attention_mask": prompt_mask, "max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    with torch.no_grad():
        expected = sdpa.generate(prompt, **kwargs)
        torch.testing.assert_close(varlen.generate(prompt, **kwargs), expected)


def test_mask_function_skips_only_mask_free_cache_free_calls():
    from transformers.masking_utils import causal_mask_function

    free = varlen_attention.varlen_mask(1, 6, 6, mask_function=causal_mask_function, allow_is_causal_skip=False)
    assert free is None
    padding = torch.tensor([[0, 1, 1, 1]], dtype=torch.bool)
    padded = varlen_attention.varlen_mask(1, 4, 4, mask_function=causal_mask_function, attention_mask=padding)
    assert padded.shape == (1, 1, 4, 4) and not bool(padded[0, 0, :, 0].any())  # nobody attends the pad
    cached = varlen_attention.varlen_mask(1, 1, 5, q_offset=4, mask_function=causal_mask_function,
                                          allow_is_causal_skip=False)
    assert cached is not None and cached.shape == (1, 1, 1, 5)
