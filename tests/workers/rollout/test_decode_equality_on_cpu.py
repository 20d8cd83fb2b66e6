"""Each optimisation of the hf decode loop (``decoding.DecodeOptions``) against the unoptimised path.

- the engine's default path (preallocated KV cache: in-place writes) vs the engine before (transformers'
  ``DynamicCache``: ``torch.cat`` per step): same greedy tokens and the same log-probs, bit for bit; same sampled
  tokens from the same seed (seeded sampling unchanged);
- compaction of finished rows (every step, at 25%, never) changes nothing but the work done: same greedy tokens,
  log-probs within 1e-5 (a matmul over fewer rows may sum in another order: ~1e-6 seen);
- a preallocated cache too small for the call grows and still gives the same result;
- the engine against ``transformers.generate`` on the same prompts: same greedy tokens, log-probs within 1e-5;
- the packed output head (oneDNN, prepacked weight) against ``F.linear``: same tokens, greedy and sampled from a
  seed, log-probs within 1e-5; ``draw="auto"`` picks the inverse CDF only for large vocabularies;
- the prefill of the distinct prompts' common prefix once (the chat template's opening) against each prompt
  prefilled whole: same tokens, greedy and sampled, log-probs within 1e-5, with either cache;
- ``draw_inverse_cdf`` (``auto``'s pick for large vocabularies) draws the distribution it is given (frequencies vs hand-set probabilities;
  zero-mass tokens never drawn), the property that lets it replace ``torch.multinomial``; the decode loop with
  it gives the same greedy results (greedy never draws).

The random tiny model stops on 24 ids (as in ``bench_rollout.py``'s eos scenario) plus two of its own greedy
tokens, so rows end at different lengths and compaction runs.
"""

from __future__ import annotations

import pytest
import torch
from rollout_testlib import make_prompts, redrawn_tiny_model

from hybridrl.generation.records import SamplingParams
from hybridrl.models.transformers.preallocated_cache import PreallocatedCache, preallocated_cache_or_none
from hybridrl.workers.rollout.decoding import (
    AUTO_INVERSE_CDF_MIN_VOCAB,
    DecodeOptions,
    decode_batch,
    draw_inverse_cdf,
    resolve_draw,
)

BENCH_STOP_IDS = tuple(range(100, 124))
REFERENCE = DecodeOptions(kv_cache="dynamic", draw="multinomial", packed_head=False, fp32_attention=False,
                          share_common_prefix=False)  # before issue 22
NEW_TOKENS = 12


def _params(greedy: bool, ignore_eos: bool = False, stop_ids: tuple[int, ...] = BENCH_STOP_IDS) -> SamplingParams:
    return SamplingParams(
        temperature=0.0 if greedy else 0.9, top_k=-1 if greedy else 50, top_p=1.0 if greedy else 0.95,
        do_sample=not greedy, max_new_tokens=NEW_TOKENS, n=1, ignore_eos=ignore_eos,
        eos_token_ids=stop_ids, pad_token_id=0, calculate_log_probs=True,
    )


def _prompts(tokenizer, copies: int = 3):
    """4 distinct left-padded prompts, each repeated ``copies`` times (GRPO's n), ``[4 * copies, P]``."""
    batch = make_prompts(tokenizer).batch
    return (batch["input_ids"].repeat_interleave(copies, 0), batch["attention_mask"].repeat_interleave(copies, 0))


def _decode(model, tokenizer, params, options, seed=0):
    input_ids, attention_mask = _prompts(tokenizer)
    return decode_batch(model, input_ids, attention_mask, params, torch.Generator().manual_seed(seed), options)


def _assert_same(got, expected, atol=0.0, rtol=0.0):
    assert got.token_ids == expected.token_ids
    for a, b in zip(got.log_probs, expected.log_probs):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=atol, rtol=rtol)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return redrawn_tiny_model(tiny_model_dir)


@pytest.fixture(scope="module")
def stop_ids(model, tokenizer):
    """The bench's 24 stop ids + the 3rd greedy token of prompt 0 and the 7th of prompt 2."""
    free = _decode(model, tokenizer, _params(greedy=True, ignore_eos=True), REFERENCE).token_ids
    return BENCH_STOP_IDS + (free[0][2], free[6][6])


def test_the_tiny_model_gets_the_preallocated_cache_and_rows_end_at_different_lengths(model, tokenizer, stop_ids):
    assert isinstance(preallocated_cache_or_none(model.config, 64), PreallocatedCache)
    result = _decode(model, tokenizer, _params(greedy=True, stop_ids=stop_ids), DecodeOptions())
    lengths = {len(row) for row in result.token_ids}
    assert len(lengths) >= 2 and NEW_TOKENS in lengths  # some rows stop early, some run to the limit


@pytest.mark.parametrize("greedy", [True, False])
def test_preallocated_cache_equals_dynamic_cache_bit_for_bit(model, tokenizer, stop_ids, greedy):
    params = _params(greedy, stop_ids=stop_ids)
    expected = _decode(model, tokenizer, params, REFERENCE)
    _assert_same(_decode(model, tokenizer, params, DecodeOptions(packed_head=False)), expected)


@pytest.mark.parametrize("greedy", [True, False])
def test_the_packed_output_head_gives_the_same_tokens_and_log_probs_within_1e_5(model, tokenizer, stop_ids, greedy):
    """The engine's default (``auto`` draws multinomial on this 512-token vocabulary) with the packed head forced on
    this small head vs the reference: the head's matmul sums in another order, nothing else changes."""
    assert resolve_draw("auto", model.config.vocab_size) == "multinomial"
    params = _params(greedy, stop_ids=stop_ids)
    packed = DecodeOptions(packed_head_min_vocab=0)
    _assert_same(_decode(model, tokenizer, params, packed), _decode(model, tokenizer, params, REFERENCE), atol=1e-5)


@pytest.mark.parametrize("kv_cache", ["preallocated", "dynamic"])
@pytest.mark.parametrize("greedy", [True, False])
def test_the_common_prefix_prefill_gives_the_same_tokens_and_log_probs(model, tokenizer, stop_ids, greedy, kv_cache,
                                                                      monkeypatch):
    """The 4 chat prompts begin with the same template tokens: prefilled once (a batch of 1), then each prompt's
    tail on top; the decode then attends over the prefix-first cache."""
    from hybridrl.workers.rollout import decoding

    monkeypatch.setattr(decoding, "MIN_SAVED_PREFIX_POSITIONS", 1)
    shapes = []
    hook = model.model.register_forward_pre_hook(
        lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    params = _params(greedy, stop_ids=stop_ids)
    try:
        shared = _decode(model, tokenizer, params, DecodeOptions(kv_cache=kv_cache, packed_head=False))
    finally:
        hook.remove()
    input_ids, _ = _prompts(tokenizer)
    assert shapes[0][0] == 1 and shapes[1][0] == 4 and shapes[0][1] + shapes[1][1] == input_ids.shape[1]
    # the prefix and the tails are two prefills, a different summation order: on an AVX-512 CPU a log-prob of -2.26
    # came out 1.1e-5 apart (~46 float32 ulps), so the bound is relative as well as absolute
    _assert_same(shared, _decode(model, tokenizer, params, REFERENCE), atol=1e-5, rtol=1e-5)


def test_auto_draws_by_inverse_cdf_on_large_vocabularies_only():
    assert resolve_draw("auto", AUTO_INVERSE_CDF_MIN_VOCAB) == "inverse_cdf"
    assert resolve_draw("auto", 49152) == "inverse_cdf"  # SmolLM2
    assert resolve_draw("auto", AUTO_INVERSE_CDF_MIN_VOCAB - 1) == "multinomial"
    assert resolve_draw("multinomial", 49152) == "multinomial" and resolve_draw("inverse_cdf", 512) == "inverse_cdf"


def test_the_inverse_cdf_draw_leaves_greedy_decoding_alone(model, tokenizer, stop_ids):
    params = _params(greedy=True, stop_ids=stop_ids)
    _assert_same(_decode(model, tokenizer, params, DecodeOptions(draw="inverse_cdf", packed_head=False)),
                 _decode(model, tokenizer, params, REFERENCE))


@pytest.mark.parametrize("compact_fraction", [0.0, 0.25, 2.0])  # every step, the default, never
def test_compaction_changes_nothing(model, tokenizer, stop_ids, compact_fraction):
    params = _params(greedy=True, stop_ids=stop_ids)
    expected = _decode(model, tokenizer, params, REFERENCE)
    got = _decode(model, tokenizer, params, DecodeOptions(compact_fraction=compact_fraction))
    _assert_same(got, expected, atol=1e-5)


def test_a_too_small_preallocated_cache_grows_and_keeps_its_values(model, tokenizer):
    cache = PreallocatedCache(num_layers=1, capacity=2)
    first, second = torch.randn(2, 1, 3, 4), torch.randn(2, 1, 1, 4)
    cache.update(first, -first, 0)  # 3 positions into a capacity of 2: grows
    keys, values = cache.update(second, -second, 0)
    assert cache.get_seq_length() == 4 and keys.shape == (2, 1, 4, 4)
    assert torch.equal(keys, torch.cat([first, second], -2)) and torch.equal(values, -keys)
    cache.batch_select_indices(torch.tensor([1, 1, 0]))  # gather with a repeat (the prefill's n copies)
    assert torch.equal(cache.layers[0].keys, torch.cat([first, second], -2)[[1, 1, 0]])
    # a whole prefill into a 4-position cache: same logits as transformers' DynamicCache
    from transformers import DynamicCache

    from hybridrl.workers.rollout.decoding import prefill_distinct_rows

    input_ids, attention_mask = _prompts(tokenizer)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        small = prefill_distinct_rows(model, input_ids, attention_mask, position_ids, PreallocatedCache(2, 4))
        dynamic = prefill_distinct_rows(model, input_ids, attention_mask, position_ids, DynamicCache())
    assert torch.equal(small, dynamic)


def test_greedy_equals_transformers_generate(model, tokenizer, stop_ids):
    """Same tokens and log-probs (1e-5) as ``generate`` on the same left-padded batch, EOS on the stop ids."""
    input_ids, attention_mask = _prompts(tokenizer, copies=2)
    params = _params(greedy=True, stop_ids=stop_ids)
    ours = decode_batch(model, input_ids, attention_mask, params)
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                         max_new_tokens=NEW_TOKENS, eos_token_id=list(stop_ids), pad_token_id=0,
                         output_logits=True, return_dict_in_generate=True)
    generated = out.sequences[:, input_ids.shape[1]:]
    log_probs = torch.log_softmax(torch.stack(out.logits, 1).float(), -1).gather(-1, generated[..., None])[..., 0]
    for row, (tokens, logps) in enumerate(zip(ours.token_ids, ours.log_probs)):
        assert tokens == generated[row, : len(tokens)].tolist()
        torch.testing.assert_close(torch.tensor(logps), log_probs[row, : len(tokens)], atol=1e-5, rtol=0)


def test_inverse_cdf_draws_the_given_distribution():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0], [0.0, 0.0, 0.0, 0.0, 2.0]])  # row 2: unnormalised mass
    assert int(draw_inverse_cdf(probs, torch.Generator().manual_seed(0))[1]) == 4
    generator = torch.Generator().manual_seed(0)
    many = torch.cat([draw_inverse_cdf(probs[:1].expand(1000, 5), generator) for _ in range(20)])  # 20 000 draws
    frequencies = torch.bincount(many, minlength=5).float() / many.numel()
    assert frequencies[1] == 0 and frequencies[4] == 0  # zero mass: never drawn
    # binomial standard error at 20 000 draws is <= 0.0036: 4 sigma
    torch.testing.assert_close(frequencies, probs[0], atol=0.015, rtol=0)


def test_inverse_cdf_never_leaves_the_support_at_the_top_of_the_range(monkeypatch):
    """A uniform at the very top of [0, 1) still lands on the last token with mass, not past the vocabulary."""
    top = float(torch.nextafter(torch.tensor(1.0), torch.tensor(0.0)))
    monkeypatch.setattr(torch, "rand", lambda shape, **_: torch.full(shape, top))
    assert draw_inverse_cdf(torch.tensor([[0.25, 0.75, 0.0, 0.0]])).tolist() == [1]
    assert draw_inverse_cdf(torch.tensor([[0.3, 0.3, 0.3]])).tolist() == [2]  # mass 0.9 < 1: scaled, index < V


@pytest.mark.parametrize("min_new_tokens", [5, NEW_TOKENS])
def test_min_new_tokens_bans_the_stop_ids_like_generate(model, tokenizer, stop_ids, min_new_tokens):
    """``rollout.min_tokens``: no stop id before ``min_new_tokens`` tokens; same tokens and (unfiltered)
    log-probs as ``generate(min_new_tokens=...)``, which bans them with its own logits processor."""
    from dataclasses import replace

    input_ids, attention_mask = _prompts(tokenizer, copies=2)
    free = decode_batch(model, input_ids, attention_mask, _params(greedy=True, stop_ids=stop_ids))
    assert min(len(tokens) for tokens in free.token_ids) < 5  # without it some rows stop early
    params = replace(_params(greedy=True, stop_ids=stop_ids), min_new_tokens=min_new_tokens)
    ours = decode_batch(model, input_ids, attention_mask, params)
    for tokens in ours.token_ids:
        assert len(tokens) >= min_new_tokens and not set(tokens[:min_new_tokens]) & set(stop_ids)
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                         max_new_tokens=NEW_TOKENS, min_new_tokens=min_new_tokens, eos_token_id=list(stop_ids),
                         pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    generated = out.sequences[:, input_ids.shape[1]:]
    log_probs = torch.log_softmax(torch.stack(out.logits, 1).float(), -1).gather(-1, generated[..., None])[..., 0]
    for row, (tokens, logps) in enumerate(zip(ours.token_ids, ours.log_probs)):
        assert tokens == generated[row, : len(tokens)].tolist()
        torch.testing.assert_close(torch.tensor(logps), log_probs[row, : len(tokens)], atol=1e-5, rtol=0)


def test_inverse_cdf_on_a_49k_vocabulary_draws_the_given_frequencies():
    """SmolLM2's vocabulary size, a peaked distribution with a long tail (what ``auto`` meets in practice): the
    fp32 cumulative sum over 49 152 entries keeps every heavy token's frequency and the tail's mass
    (20 000 draws, tolerance 0.015 ≈ 4 standard errors)."""
    vocab, draws = 49152, 20_000
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(1)) * 2.0
    logits[[7, 20_000, 49_000]] += torch.tensor([9.0, 8.5, 8.0])  # three heavy tokens spread over the vocabulary
    probs = logits.softmax(-1).expand(draws, vocab)
    ours = draw_inverse_cdf(probs, torch.Generator().manual_seed(2))
    for token in (7, 20_000, 49_000):
        assert abs((ours == token).float().mean().item() - probs[0, token].item()) < 0.015
    heavy = torch.tensor([7, 20_000, 49_000])
    tail_mass = 1.0 - probs[0, heavy].sum().item()
    assert tail_mass > 0.1  # the tail is a real share of the draws
    assert abs((~torch.isin(ours, heavy)).float().mean().item() - tail_mass) < 0.015
