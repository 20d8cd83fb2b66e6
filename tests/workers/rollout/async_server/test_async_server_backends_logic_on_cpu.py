"""Pure logic of the vLLM and SGLang async servers (request conversion, output parsing) and the SGLang server's
event-loop plumbing against a fake ``async_generate`` (SGLang needs CUDA; vLLM's real test is
test_vllm_async_server_on_cpu.py in .venv-vllm)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from rollout_testlib import rollout_config

from hybridrl.workers.rollout.async_server import build_async_server, resolve_request_params
from hybridrl.workers.rollout.async_server.sglang_server import (
    SGLangAsyncServer,
    parse_sglang_output,
    sglang_request_kwargs,
)
from hybridrl.workers.rollout.async_server.vllm_engine import parse_vllm_output, vllm_sampling_kwargs

EOS = (2, 9)


def resolve(params):
    return resolve_request_params(params, rollout_config(), eos_token_ids=EOS, pad_token_id=3)


def test_vllm_request_kwargs_carry_seed_logprobs_and_stop_ids():
    kwargs = vllm_sampling_kwargs(resolve({"max_tokens": 5, "temperature": 0.7, "top_k": 4, "seed": 3}))
    assert kwargs == {
        "n": 1,
        "max_tokens": 5,
        "min_tokens": 0,
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": 4,
        "ignore_eos": False,
        "stop_token_ids": [2, 9],
        "detokenize": False,
        "logprobs": 0,
        "seed": 3,
    }
    greedy = vllm_sampling_kwargs(resolve({"max_tokens": 5, "temperature": 0, "seed": 3, "logprobs": False}))
    assert "seed" not in greedy and "logprobs" not in greedy and greedy["temperature"] == 0.0


def test_vllm_output_parsing():
    step = lambda token, logprob: {token: SimpleNamespace(logprob=logprob)}  # noqa: E731
    completion = SimpleNamespace(token_ids=[5, 9], logprobs=[step(5, -0.5), step(9, -1.25)], finish_reason="stop")
    output = SimpleNamespace(outputs=[completion], finished=True)
    parsed = parse_vllm_output(output, want_log_probs=True)
    assert (parsed.token_ids, parsed.log_probs, parsed.stop_reason) == ([5, 9], [-0.5, -1.25], "stop")
    completion.finish_reason = "length"
    assert parse_vllm_output(output, want_log_probs=False).log_probs is None
    assert parse_vllm_output(output, want_log_probs=False).stop_reason == "length"
    completion.finish_reason = "abort"
    assert parse_vllm_output(output, want_log_probs=False).stop_reason == "aborted"


def test_sglang_request_kwargs_and_output_parsing():
    params = resolve({"max_tokens": 3, "temperature": 0.9, "seed": 5, "logprobs": True})
    kwargs = sglang_request_kwargs([4, 5], params)
    assert kwargs["input_ids"] == [4, 5] and kwargs["return_logprob"] is True
    assert kwargs["sampling_params"] == {
        "n": 1,
        "max_new_tokens": 3,
        "min_new_tokens": 0,
        "temperature": 0.9,
        "top_p": 1.0,
        "top_k": -1,
        "ignore_eos": False,
        "stop_token_ids": [2, 9],
        "skip_special_tokens": False,
        "sampling_seed": 5,
    }
    output = {
        "output_ids": [7, 9],
        "meta_info": {"output_token_logprobs": [(-0.1, 7, None), (-0.2, 9, None)], "finish_reason": {"type": "stop"}},
    }
    parsed = parse_sglang_output(output, params)
    assert (parsed.token_ids, parsed.log_probs, parsed.stop_reason) == ([7, 9], [-0.1, -0.2], "stop")
    capped = {"output_ids": [7, 8, 6], "meta_info": {"finish_reason": {"type": "length", "length": 3}}}
    no_logprobs = resolve({"max_tokens": 3, "logprobs": False})
    assert parse_sglang_output([capped], no_logprobs).stop_reason == "length"  # a batch of one is unwrapped
    assert parse_sglang_output([capped], no_logprobs).log_probs is None


class _FakeSGLangEngine:
    """Stands in for ``sglang.Engine``: ``async_generate`` echoes the prompt reversed after a short await."""

    def __init__(self):
        self.calls = []

    async def async_generate(self, input_ids, sampling_params, return_logprob):
        self.calls.append((input_ids, sampling_params, return_logprob))
        await asyncio.sleep(0.01)
        if input_ids == [0]:
            raise RuntimeError("sglang scheduler died")
        ids = list(reversed(input_ids))[: sampling_params["max_new_tokens"]]
        logprobs = [(-1.0, t, None) for t in ids]
        return {
            "output_ids": ids,
            "meta_info": {"output_token_logprobs": logprobs, "finish_reason": {"type": "length"}},
        }


def test_sglang_server_runs_requests_on_its_own_loop_and_drains_on_stop():
    engine = SimpleNamespace(engine=_FakeSGLangEngine(), eos_token_ids=EOS, pad_token_id=3)
    server = SGLangAsyncServer(engine, rollout_config())
    with pytest.raises(RuntimeError, match="start"):
        server.submit("r", [1], {"max_tokens": 1})
    server.start()
    futures = [server.submit(f"r{i}", [i + 1, i + 2, i + 3], {"max_tokens": 2, "logprobs": True}) for i in range(5)]
    failing = server.submit("bad", [0], {"max_tokens": 2})

    async def from_a_caller_loop():
        return await server.generate("g", [4, 5], {"max_tokens": 4})

    assert asyncio.run(from_a_caller_loop()).token_ids == [5, 4]
    server.stop()
    assert all(f.done() for f in futures)
    assert [f.result().token_ids for f in futures] == [[i + 3, i + 2] for i in range(5)]
    assert futures[0].result().log_probs == [-1.0, -1.0]
    with pytest.raises(RuntimeError, match="scheduler died"):
        failing.result()


def test_build_async_server_rejects_an_engine_without_a_server():
    with pytest.raises(TypeError, match="no async server for rollout engine SimpleNamespace"):
        build_async_server(SimpleNamespace(), rollout_config())
