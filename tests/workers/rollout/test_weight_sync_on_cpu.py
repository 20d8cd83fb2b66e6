"""Hybrid-engine weight sync: the hf rollout follows the actor, and the verification catches a skipped sync."""

from __future__ import annotations

import pytest
import torch
from rollout_testlib import build_handle, forward_log_probs, make_prompts

from hybridrl.workers.sharding_manager import WeightSyncError, iter_buckets, sample_indices


def _perturb(module: torch.nn.Module, scale: float = 0.5, seed: int = 1) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale)


def test_rollout_follows_actor_after_update(tiny_model_dir, tokenizer, actor):
    handle = build_handle(tiny_model_dir, tokenizer, actor, response_length=6)
    prompts = make_prompts(tokenizer, do_sample=False)
    before = handle.generate_sequences(prompts)
    assert not handle.weights_stale
    _perturb(actor)  # an "actor update"
    handle.mark_weights_stale()
    after = handle.generate_sequences(prompts)
    assert after.meta_info["metrics"]["rollout/weight_sync_tensors"] > 0
    assert not torch.equal(before.batch["responses"], after.batch["responses"])
    # the engine generated with the *new* weights: its log-probs equal the updated actor's forward
    mask = after.batch["attention_mask"][:, -6:].bool()
    expected = forward_log_probs(actor, after, temperature=1.0)
    torch.testing.assert_close(after.batch["rollout_log_probs"][mask], expected[mask], atol=1e-4, rtol=1e-4)


def test_verification_fails_when_sync_is_skipped(tiny_model_dir, tokenizer, actor):
    handle = build_handle(tiny_model_dir, tokenizer, actor, response_length=4)
    handle.generate_sequences(make_prompts(tokenizer, do_sample=False))
    assert handle.verify() >= 1  # in sync
    _perturb(actor)  # updated actor, but mark_weights_stale() is "forgotten"
    with pytest.raises(WeightSyncError, match="mark_weights_stale"):
        handle.verify()


def test_verification_fails_when_engine_drops_weights(tiny_model_dir, tokenizer, actor):
    handle = build_handle(tiny_model_dir, tokenizer, actor, response_length=4)
    _perturb(actor)  # the engine's initial weights must differ from the actor's for a dropped load to show
    handle.engine.update_weights = lambda named_tensors: None  # an engine whose load silently does nothing
    with pytest.raises(WeightSyncError, match="does not hold the trainer's weights"):
        handle.generate_sequences(make_prompts(tokenizer, do_sample=False))


def test_verification_catches_a_perturbed_engine_copy(tiny_model_dir, tokenizer, actor):
    handle = build_handle(tiny_model_dir, tokenizer, actor, response_length=4)
    handle.generate_sequences(make_prompts(tokenizer, do_sample=False))
    with torch.no_grad():
        handle.engine.model.model.embed_tokens.weight.mul_(1.001)
    with pytest.raises(WeightSyncError, match="embed_tokens"):
        handle.verify()


def test_unknown_weight_name_is_a_clear_error(tiny_model_dir, tokenizer, actor):
    handle = build_handle(tiny_model_dir, tokenizer, actor)
    with pytest.raises(KeyError, match="model.path"):
        handle.engine.update_weights([("not.a.param", torch.zeros(1))])


def test_bf16_engine_verifies_against_cast_values(tiny_model_dir, tokenizer, actor):
    handle = build_handle(tiny_model_dir, tokenizer, actor, dtype="bfloat16", response_length=4)
    handle.generate_sequences(make_prompts(tokenizer, do_sample=False))
    assert handle.engine.weight_dtype == torch.bfloat16
    assert handle.verify() >= 1  # fp32 trainer values cast to bf16 equal the engine's exactly


def test_iter_buckets_respects_the_byte_budget():
    tensors = [(f"t{i}", torch.zeros(n)) for i, n in enumerate([10, 10, 30, 5])]  # fp32: 40, 40, 120, 20 bytes
    buckets = [[name for name, _ in bucket] for bucket in iter_buckets(tensors, bucket_bytes=80)]
    # 40+40 = 80 fits; 120 alone exceeds the budget and gets its own bucket; 20 starts a new one
    assert buckets == [["t0", "t1"], ["t2"], ["t3"]]


def test_sample_indices():
    assert sample_indices(5, k=3).tolist() == [0, 2, 4]  # linspace(0, 4, 3)
    assert sample_indices(5, k=3, mode="prefix").tolist() == [0, 1, 2]
    assert sample_indices(2, k=8).tolist() == [0, 1]  # never more than numel
