"""hybridrl.models.transformers.upcast_attention: a bf16 CPU rollout's attention computed in fp32.

- the attention function is transformers' SDPA on fp32 copies, cast back (bit for bit), and leaves fp32 inputs to
  the plain function;
- the context switches only CPU bf16/fp16 ``sdpa`` (or ``hybridrl_varlen``) models, and restores their attention
  afterwards, also on an error; a varlen model decodes bit for bit as an ``sdpa`` one (an actor-built engine model
  and a separately loaded one must agree);
- a bf16 decode with it against the same decode with the bf16 kernel (the unoptimised path): the same greedy tokens
  and log-probs within bf16 noise (max 0.057 seen; the weights and activations are bf16 either way).
"""

from __future__ import annotations

import pytest
import torch

from hybridrl.generation.records import SamplingParams
from hybridrl.models.transformers.upcast_attention import UPCAST_ATTN, fp32_attention, upcast_sdpa_forward
from hybridrl.workers.rollout.decoding import DecodeOptions, decode_batch
from tests.workers.rollout.rollout_testlib import make_prompts, redrawn_tiny_model

NEW_TOKENS = 10


@pytest.fixture(scope="module")
def fp32_model(tiny_model_dir):
    return redrawn_tiny_model(tiny_model_dir, torch.float32)


@pytest.fixture(scope="module")
def bf16_model(tiny_model_dir):
    return redrawn_tiny_model(tiny_model_dir, torch.bfloat16)


def _qkv(dtype: torch.dtype):
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(3, 4, 5, 32, generator=generator).to(dtype)  # [B, H, Q, D]
    key = torch.randn(3, 2, 7, 32, generator=generator).to(dtype)  # [B, KV, K, D]: 2 query heads per kv head
    value = torch.randn(3, 2, 7, 32, generator=generator).to(dtype)
    mask = torch.ones(3, 1, 5, 7, dtype=torch.bool).tril(diagonal=2)
    mask[0, :, :, :2] = False  # left padding in row 0
    return query, key, value, mask


class _Module(torch.nn.Module):
    num_key_value_groups = 2
    is_causal = True


def test_the_attention_is_sdpa_on_fp32_copies_cast_back():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    query, key, value, mask = _qkv(torch.bfloat16)
    got, _ = upcast_sdpa_forward(_Module(), query, key, value, mask, scaling=0.2)
    expected, _ = sdpa_attention_forward(_Module(), query.float(), key.float(), value.float(), mask, scaling=0.2)
    assert got.dtype == torch.bfloat16 and got.shape == (3, 5, 4, 32)
    assert torch.equal(got, expected.to(torch.bfloat16))


def test_fp32_inputs_go_to_the_plain_function():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    query, key, value, mask = _qkv(torch.float32)
    got, _ = upcast_sdpa_forward(_Module(), query, key, value, mask)
    assert torch.equal(got, sdpa_attention_forward(_Module(), query, key, value, mask)[0])


def test_the_context_switches_a_bf16_model_and_restores_sdpa(bf16_model):
    assert bf16_model.config._attn_implementation == "sdpa"
    with fp32_attention(bf16_model) as switched:
        assert switched and bf16_model.config._attn_implementation == UPCAST_ATTN
    assert bf16_model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError, match="boom"), fp32_attention(bf16_model):
        raise RuntimeError("boom")
    assert bf16_model.config._attn_implementation == "sdpa"


def test_fp32_models_and_disabled_calls_keep_their_attention(fp32_model, bf16_model):
    with fp32_attention(fp32_model) as switched:
        assert not switched and fp32_model.config._attn_implementation == "sdpa"
    with fp32_attention(bf16_model, enabled=False) as switched:
        assert not switched and bf16_model.config._attn_implementation == "sdpa"


def _greedy(model, tokenizer, options: DecodeOptions):
    batch = make_prompts(tokenizer).batch
    params = SamplingParams(
        temperature=0.0, top_k=-1, top_p=1.0, do_sample=False, max_new_tokens=NEW_TOKENS, n=1, ignore_eos=True,
        eos_token_ids=(1,), pad_token_id=0, calculate_log_probs=True,
    )
    return batch, decode_batch(model, batch["input_ids"], batch["attention_mask"], params, None, options)


def test_a_bf16_decode_with_fp32_attention_matches_the_bf16_kernel(bf16_model, tokenizer):
    _, upcast = _greedy(bf16_model, tokenizer, DecodeOptions())
    _, plain = _greedy(bf16_model, tokenizer, DecodeOptions(fp32_attention=False))
    assert bf16_model.config._attn_implementation == "sdpa"  # restored after the decode
    assert upcast.token_ids == plain.token_ids  # greedy: the same tokens
    got, ref = torch.tensor(upcast.log_probs), torch.tensor(plain.log_probs)
    torch.testing.assert_close(got, ref, atol=0.1, rtol=0)  # bf16 noise (weights, activations)
    assert not torch.equal(got, ref)  # the attention did run in another precision


def test_a_varlen_model_switches_too_and_decodes_as_an_sdpa_model(tiny_model_dir, bf16_model, tokenizer):
    from hybridrl.models.transformers.varlen_attention import VARLEN_ATTN, use_varlen_attention

    varlen = redrawn_tiny_model(tiny_model_dir, torch.bfloat16)
    assert use_varlen_attention(varlen) and varlen.config._attn_implementation == VARLEN_ATTN
    with fp32_attention(varlen) as switched:
        assert switched and varlen.config._attn_implementation == UPCAST_ATTN
    assert varlen.config._attn_implementation == VARLEN_ATTN
    _, got = _greedy(varlen, tokenizer, DecodeOptions())
    _, expected = _greedy(bf16_model, tokenizer, DecodeOptions())
    assert got.token_ids == expected.token_ids and got.log_probs == expected.log_probs
