"""The rollout contract on the HF engines (fast loop ``hf`` and ``transformers.generate`` ``hf_generate``)."""

from __future__ import annotations

import pytest
import torch
from rollout_testlib import build_handle, forward_log_probs, make_prompts

from hybridrl.workers.rollout.output import ROLLOUT_LOG_PROB_PAD

ENGINES = ["hf", "hf_generate"]


@pytest.mark.parametrize("name", ENGINES)
def test_shapes_padding_positions(tiny_model_dir, tokenizer, actor, name):
    handle = build_handle(tiny_model_dir, tokenizer, actor, name=name, response_length=6)
    prompts = make_prompts(tokenizer, do_sample=False)
    out = handle.generate_sequences(prompts)
    batch_size, prompt_length = prompts.batch["input_ids"].shape
    b = out.batch
    assert b["prompts"].shape == (batch_size, prompt_length)
    assert b["responses"].shape == (batch_size, 6)
    for key in ("input_ids", "attention_mask", "position_ids"):
        assert b[key].shape == (batch_size, prompt_length + 6), key
    assert torch.equal(b["prompts"], prompts.batch["input_ids"])
    assert torch.equal(b["input_ids"][:, prompt_length:], b["responses"])
    assert torch.equal(b["attention_mask"][:, :prompt_length], prompts.batch["attention_mask"])
    # positions continue after the last prompt position: last + 1, ..., last + 6
    last = prompts.batch["position_ids"][:, -1:]
    assert torch.equal(b["position_ids"][:, prompt_length:], last + torch.arange(1, 7))
    assert list(out.non_tensor_batch["uid"]) == ["q0", "q1", "q2", "q3"]
    assert "generate_sequences" in out.meta_info["timing"]
    assert out.meta_info["metrics"]["rollout/weight_sync_verified_tensors"] >= 1


@pytest.mark.parametrize("name", ENGINES)
def test_eos_masking_and_ignore_eos(tiny_model_dir, tokenizer, actor, name):
    handle = build_handle(tiny_model_dir, tokenizer, actor, name=name, response_length=8)
    free = handle.generate_sequences(make_prompts(tokenizer, do_sample=False)).batch["responses"]
    # declare the 3rd greedy token of row 0 an extra EOS id: row 0 must stop right after it
    stop = int(free[0, 2])
    out = handle.generate_sequences(make_prompts(tokenizer, do_sample=False, eos_token_id=stop)).batch
    first_stop = int((free[0] == stop).nonzero()[0])
    assert first_stop <= 2
    assert torch.equal(out["responses"][0, : first_stop + 1], free[0, : first_stop + 1])
    assert (out["responses"][0, first_stop + 1 :] == tokenizer.pad_token_id).all()  # right-padded with pad id
    response_mask = out["attention_mask"][0, -8:]
    assert response_mask.tolist() == [1] * (first_stop + 1) + [0] * (8 - first_stop - 1)  # EOS included
    ignored = handle.generate_sequences(make_prompts(tokenizer, do_sample=False, eos_token_id=stop, ignore_eos=True))
    assert torch.equal(ignored.batch["responses"], free)  # ignore_eos: full length, same greedy tokens


def test_greedy_is_deterministic_and_engines_agree(tiny_model_dir, tokenizer, actor):
    fast = build_handle(tiny_model_dir, tokenizer, actor, name="hf", response_length=10)
    reference = build_handle(tiny_model_dir, tokenizer, actor, name="hf_generate", response_length=10)
    prompts = make_prompts(tokenizer, do_sample=False)
    first = fast.generate_sequences(prompts).batch["responses"]
    assert torch.equal(first, fast.generate_sequences(prompts).batch["responses"])
    assert torch.equal(first, reference.generate_sequences(prompts).batch["responses"])


def test_validate_uses_val_kwargs_greedy(tiny_model_dir, tokenizer, actor):
    handle = build_handle(tiny_model_dir, tokenizer, actor, response_length=6, temperature=5.0)
    greedy = handle.generate_sequences(make_prompts(tokenizer, do_sample=False)).batch["responses"]
    validated = handle.generate_sequences(make_prompts(tokenizer, validate=True)).batch["responses"]
    assert torch.equal(greedy, validated)  # val_kwargs: do_sample False → greedy despite temperature 5


@pytest.mark.parametrize("name", ENGINES)
def test_response_length_from_meta_info(tiny_model_dir, tokenizer, actor, name):
    handle = build_handle(tiny_model_dir, tokenizer, actor, name=name, response_length=8)
    out = handle.generate_sequences(make_prompts(tokenizer, do_sample=False, response_length=3))
    assert out.batch["responses"].shape[1] == 3
    assert out.batch["input_ids"].shape[1] == out.batch["prompts"].shape[1] + 3


def test_n_repeats_rows_interleaved(tiny_model_dir, tokenizer, actor):
    handle = build_handle(tiny_model_dir, tokenizer, actor, response_length=5)
    out = handle.generate_sequences(make_prompts(tokenizer, n=3))
    assert out.batch["responses"].shape == (12, 5)
    assert list(out.non_tensor_batch["uid"][:6]) == ["q0", "q0", "q0", "q1", "q1", "q1"]
    assert torch.equal(out.batch["prompts"][0], out.batch["prompts"][2])
    # with 512-token vocab and T=1 three samples of 5 tokens are (almost surely) not all identical
    assert not (
        torch.equal(out.batch["responses"][0], out.batch["responses"][1])
        and torch.equal(out.batch["responses"][1], out.batch["responses"][2])
    )


@pytest.mark.parametrize("name", ENGINES)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollout_log_probs_match_a_full_forward(tiny_model_dir, tokenizer, actor, name, temperature):
    handle = build_handle(
        tiny_model_dir, tokenizer, actor, name=name, response_length=8, temperature=temperature, top_k=50, top_p=0.9
    )
    out = handle.generate_sequences(make_prompts(tokenizer, temperature=temperature))
    mask = out.batch["attention_mask"][:, -8:].bool()
    expected = forward_log_probs(actor, out, temperature)
    got = out.batch["rollout_log_probs"]
    # top-k/top-p shape the sampling only: log-probs are on the full distribution at temperature T
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-4, rtol=1e-4)
    assert (got[~mask] == ROLLOUT_LOG_PROB_PAD).all()


def test_shared_prefill_of_repeated_prompts_is_exact(tiny_model_dir, tokenizer, actor):
    """``n`` copies of a prompt are prefilled once (decoding.prefill_distinct_rows): greedy copies equal the
    single-copy answer, and sampled tokens' log-probs equal a full forward of each row."""
    greedy = build_handle(tiny_model_dir, tokenizer, actor, response_length=6, top_k=1)  # do_sample=False forces n=1
    once = greedy.generate_sequences(make_prompts(tokenizer))
    thrice = greedy.generate_sequences(make_prompts(tokenizer, n=3))
    assert torch.equal(thrice.batch["responses"][::3], once.batch["responses"])
    assert torch.equal(thrice.batch["responses"][1::3], once.batch["responses"])

    sampled = build_handle(tiny_model_dir, tokenizer, actor, response_length=6)
    out = sampled.generate_sequences(make_prompts(tokenizer, n=4))
    mask = out.batch["attention_mask"][:, -6:].bool()
    expected = forward_log_probs(actor, out, 1.0)
    torch.testing.assert_close(out.batch["rollout_log_probs"][mask], expected[mask], atol=1e-4, rtol=1e-4)
