"""Continuous batching of the hf async server on the tiny model: same tokens as one-at-a-time generation,
slots freed by finished requests, batch-independent seeded sampling, draining stop, errors reach the callers."""

from __future__ import annotations

import asyncio

import pytest
import torch
from async_server_testlib import (
    QUESTIONS,
    hf_engine,
    one_at_a_time_greedy,
    prompt_ids,
    serving,
    spread_weights,
    top2_margin,
)

from hybridrl.workers.rollout.async_server.engine_loop import ServerRequest
from hybridrl.workers.rollout.async_server.hf_batcher import HFBatcher

MAX_TOKENS = [3, 12, 5, 16, 1, 9]
RESULT_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return spread_weights(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval())


@pytest.fixture(scope="module")
def stop_token(model, tokenizer):
    """A token the greedy model emits 5th for QUESTIONS[2]: an extra EOS, so some requests stop early."""
    engine = hf_engine(model, tokenizer, response_length=16)
    tokens, _ = one_at_a_time_greedy(engine, tokenizer, QUESTIONS[2], 16)
    return tokens[4]


def test_concurrent_greedy_requests_match_one_at_a_time_generation(model, tokenizer, stop_token):
    engine = hf_engine(model, tokenizer, extra_eos=[stop_token], response_length=16, max_num_seqs=4)
    prompts = [prompt_ids(tokenizer, q) for q in QUESTIONS]
    assert len({len(p) for p in prompts}) == len(prompts)  # all prompt lengths differ
    with serving(engine) as server:  # 6 requests, 4 slots: two wait and join mid-flight
        futures = [
            server.submit(f"r{i}", ids, {"max_tokens": n, "temperature": 0, "logprobs": True})
            for i, (ids, n) in enumerate(zip(prompts, MAX_TOKENS))
        ]
        outputs = [f.result(timeout=RESULT_TIMEOUT_S) for f in futures]
    reasons = []
    for question, ids, n, output in zip(QUESTIONS, prompts, MAX_TOKENS, outputs):
        ref_tokens, ref_log_probs = one_at_a_time_greedy(engine, tokenizer, question, n)
        assert output.token_ids == ref_tokens, question
        torch.testing.assert_close(torch.tensor(output.log_probs), ref_log_probs, atol=1e-4, rtol=0)
        assert top2_margin(model, ids, ref_tokens) > 1e-3  # no argmax near-tie decided the comparison
        expected = "stop" if ref_tokens[-1] in engine.eos_token_ids else "length"
        assert output.stop_reason == expected
        reasons.append(output.stop_reason)
    assert "stop" in reasons and "length" in reasons  # early finishers and full-length ones both ran


def _request(tokenizer, key: str, question: str, max_tokens: int, server_params) -> ServerRequest:
    params = server_params({"max_tokens": max_tokens, "temperature": 0, "logprobs": True, "ignore_eos": True})
    return ServerRequest(key=key, request_id=key, prompt_ids=prompt_ids(tokenizer, question), params=params)


def test_a_finished_request_frees_its_slot_for_a_waiting_one(model, tokenizer):
    engine = hf_engine(model, tokenizer, response_length=16)
    server_params = _resolver(engine)
    batcher = HFBatcher(engine, max_num_seqs=2, max_prefill_tokens=8192)
    # A: 2 tokens, B: 10 tokens, C (longest prompt, waits for a slot): 3 tokens
    for key, question, n in [("A", QUESTIONS[0], 2), ("B", QUESTIONS[1], 10), ("C", QUESTIONS[4], 3)]:
        batcher.add(_request(tokenizer, key, question, n, server_params))
    running, finished_at = [], {}
    step = 0
    while batcher.has_work():
        step += 1
        done = batcher.step()
        running.append("".join(sorted(r.request.key for r in batcher.rows) + [d.key for d, _ in done]))
        finished_at.update({request.key: (step, output) for request, output in done})
    # steps 1-2: A and B; A leaves after its 2nd token, C joins at step 3 and leaves after step 5; B runs alone
    assert running == ["AB", "BA", "BC", "BC", "BC", "B", "B", "B", "B", "B"]
    assert {k: s for k, (s, _) in finished_at.items()} == {"A": 2, "C": 5, "B": 10}
    for key, question, n in [("B", QUESTIONS[1], 10), ("C", QUESTIONS[4], 3)]:
        assert finished_at[key][1].token_ids == one_at_a_time_greedy(engine, tokenizer, question, n)[0]


def _resolver(engine):
    from hybridrl.generation.sampling import resolve_request_params

    def resolve(sampling_params):
        return resolve_request_params(
            sampling_params, engine.rollout_config, eos_token_ids=engine.eos_token_ids, pad_token_id=engine.pad_token_id
        )

    return resolve


def test_seeded_sampling_does_not_depend_on_the_batch(model, tokenizer):
    engine = hf_engine(model, tokenizer, response_length=12)
    target = prompt_ids(tokenizer, QUESTIONS[2])
    seeded = {"max_tokens": 12, "temperature": 1.0, "seed": 7, "logprobs": True, "ignore_eos": True}
    with serving(engine) as server:
        alone = server.submit("alone", target, seeded).result(timeout=RESULT_TIMEOUT_S)
        crowd = [
            server.submit("g", prompt_ids(tokenizer, QUESTIONS[0]), {"max_tokens": 5, "temperature": 0}),
            server.submit("u", prompt_ids(tokenizer, QUESTIONS[4]), {"max_tokens": 9, "temperature": 0.7}),
            server.submit("in_crowd", target, seeded),
            server.submit("k", prompt_ids(tokenizer, QUESTIONS[3]), {"max_tokens": 12, "top_k": 5, "seed": 1}),
            server.submit("again", target, seeded),
            server.submit("other_seed", target, {**seeded, "seed": 8}),
        ]
        results = [f.result(timeout=RESULT_TIMEOUT_S) for f in crowd]
    in_crowd, again, other_seed = results[2], results[4], results[5]
    assert len(alone.token_ids) == 12
    assert in_crowd.token_ids == alone.token_ids == again.token_ids
    torch.testing.assert_close(torch.tensor(in_crowd.log_probs), torch.tensor(alone.log_probs), atol=1e-4, rtol=0)
    assert other_seed.token_ids != alone.token_ids


def test_stop_finishes_every_submitted_request_then_refuses_new_ones(model, tokenizer):
    engine = hf_engine(model, tokenizer, response_length=8, max_num_seqs=3)
    with serving(engine) as server:
        futures = [
            server.submit(f"r{i}", prompt_ids(tokenizer, QUESTIONS[i % 6]), {"max_tokens": 8, "ignore_eos": True})
            for i in range(8)
        ]
        server.stop()  # returns only after all 8 finished
        assert all(f.done() for f in futures)
        assert [len(f.result().token_ids) for f in futures] == [8] * 8
        assert all(f.result().log_probs is not None for f in futures)  # rollout.calculate_log_probs=True
        with pytest.raises(RuntimeError, match="start"):
            server.submit("late", [1, 2, 3], {"max_tokens": 2})
        server.start()  # a stopped server starts again (the next training step)
        assert len(server.submit("next", [1, 2, 3], {"max_tokens": 2}).result(timeout=RESULT_TIMEOUT_S).token_ids) == 2


class _FailingModel(torch.nn.Module):
    """Forwards to the real model, but raises from its ``fail_from``-th call until healed (a fake standing in for
    a broken engine)."""

    def __init__(self, inner: torch.nn.Module, fail_from: int) -> None:
        super().__init__()
        self.inner, self.fail_from, self.calls, self.config = inner, fail_from, 0, inner.config
        self.healed = False

    def forward(self, **kwargs):
        self.calls += 1
        if self.calls >= self.fail_from and not self.healed:
            raise RuntimeError("boom: the model failed")
        return self.inner(**kwargs)


@pytest.mark.parametrize("fail_from", [1, 3], ids=["first_prefill", "later_forward"])
def test_a_model_error_fails_the_pending_futures_and_the_server_keeps_serving(model, tokenizer, fail_from):
    engine = hf_engine(model, tokenizer, response_length=8, max_num_seqs=2)
    engine.model = failing = _FailingModel(model, fail_from)
    with serving(engine) as server:
        futures = [
            server.submit(f"r{i}", prompt_ids(tokenizer, QUESTIONS[i]), {"max_tokens": 8, "ignore_eos": True})
            for i in range(4)
        ]
        for future in futures:
            with pytest.raises(RuntimeError, match="boom"):
                future.result(timeout=RESULT_TIMEOUT_S)
        failing.healed = True
        later = server.submit("later", prompt_ids(tokenizer, QUESTIONS[0]), {"max_tokens": 4, "temperature": 0})
        assert len(later.result(timeout=RESULT_TIMEOUT_S).token_ids) == 4
        assert not server.step_engine.has_work() and not server._in_engine


def test_generate_from_an_event_loop_and_request_options(model, tokenizer):
    engine = hf_engine(model, tokenizer, response_length=6)

    async def many(server):
        calls = [
            server.generate(f"r{i}", prompt_ids(tokenizer, q), {"max_tokens": 50, "temperature": 0, "logprobs": False})
            for i, q in enumerate(QUESTIONS)
        ]
        return await asyncio.gather(*calls)

    with serving(engine) as server:
        outputs = asyncio.run(many(server))
        with pytest.raises(KeyError, match="max_tokens"):
            server.submit("x", [1, 2], {"temperature": 1.0})
        with pytest.raises(ValueError, match="prompt_ids"):
            server.submit("x", [], {"max_tokens": 2})
    for question, output in zip(QUESTIONS, outputs):
        assert output.log_probs is None
        reference, _ = one_at_a_time_greedy(engine, tokenizer, question, 6)  # max_tokens 50 → response_length 6
        assert output.token_ids == reference


def test_a_cancelled_request_frees_its_slot(model, tokenizer):
    engine = hf_engine(model, tokenizer, response_length=16, max_num_seqs=1)
    with serving(engine) as server:
        first = server.submit("first", prompt_ids(tokenizer, QUESTIONS[0]), {"max_tokens": 16, "ignore_eos": True})
        second = server.submit("second", prompt_ids(tokenizer, QUESTIONS[1]), {"max_tokens": 4, "ignore_eos": True})
        assert first.cancel()  # the caller gave up (asyncio task cancelled): its row leaves the batch
        assert len(second.result(timeout=RESULT_TIMEOUT_S).token_ids) == 4
    assert first.cancelled() and not server.step_engine.has_work()


def test_a_request_the_model_cannot_hold_fails_alone(model, tokenizer):
    engine = hf_engine(model, tokenizer, response_length=8)
    limit = model.config.max_position_embeddings
    with serving(engine) as server:
        too_long = server.submit("long", [5] * limit, {"max_tokens": 2})
        fine = server.submit("fine", prompt_ids(tokenizer, QUESTIONS[0]), {"max_tokens": 2, "ignore_eos": True})
        with pytest.raises(ValueError, match=f"exceed the model's max_position_embeddings {limit}"):
            too_long.result(timeout=RESULT_TIMEOUT_S)
        assert len(fine.result(timeout=RESULT_TIMEOUT_S).token_ids) == 2


def test_cancelling_a_generate_task_cancels_its_request(model, tokenizer):
    engine = hf_engine(model, tokenizer, response_length=16, max_num_seqs=1)

    async def cancel_one_then_generate(server):
        long_task = asyncio.ensure_future(
            server.generate("long", prompt_ids(tokenizer, QUESTIONS[0]), {"max_tokens": 16, "ignore_eos": True})
        )
        await asyncio.sleep(0)  # submitted
        long_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long_task
        return await server.generate("next", prompt_ids(tokenizer, QUESTIONS[1]), {"max_tokens": 3, "ignore_eos": True})

    with serving(engine) as server:
        assert len(asyncio.run(cancel_one_then_generate(server)).token_ids) == 3


def test_seeded_rows_sample_as_one_multinomial_call_per_row(model, tokenizer):
    """The vectorised seeded draw equals ``torch.multinomial(probs[i:i+1], 1, generator=g_i)`` row by row, step
    after step (same tokens, same generator streams), for a plain and a top-k group."""
    from hybridrl.workers.rollout.async_server.hf_batcher import _Row, sample_rows
    from hybridrl.workers.rollout.decoding import filter_logits

    engine = hf_engine(model, tokenizer, response_length=8)
    server_params = _resolver(engine)
    options = [
        {"temperature": 1.0},
        {"temperature": 0.7, "top_k": 5},
        {"temperature": 1.0},
        {"temperature": 0.7, "top_k": 5},
    ]
    rows = [
        _Row(
            ServerRequest(f"r{i}", f"r{i}", [1], server_params({"max_tokens": 4, **o})),
            torch.Generator().manual_seed(i),
        )
        for i, o in enumerate(options)
    ]
    references = [torch.Generator().manual_seed(i) for i in range(len(rows))]
    logits = torch.randn(3, len(rows), 512, generator=torch.Generator().manual_seed(0))  # [steps, rows, V]
    for step_logits in logits:
        tokens, _ = sample_rows(step_logits, rows, torch.Generator())
        expected = [
            int(
                torch.multinomial(
                    filter_logits(row / o["temperature"], o.get("top_k", -1), 1.0).softmax(-1)[None], 1, generator=g
                )
            )
            for row, o, g in zip(step_logits, options, references)
        ]
        assert tokens.tolist() == expected


def test_min_tokens_keeps_a_request_from_stopping_early(model, tokenizer, stop_token):
    """QUESTIONS[2] stops at its 5th token on ``stop_token``; with ``min_tokens`` 8 the server bans every stop id
    for 8 tokens (log-probs stay unfiltered), and a request beside it without min_tokens still stops at 5."""
    engine = hf_engine(model, tokenizer, extra_eos=[stop_token], response_length=16, max_num_seqs=4)
    ids = prompt_ids(tokenizer, QUESTIONS[2])
    with serving(engine) as server:
        held = server.submit("held", ids, {"max_tokens": 12, "temperature": 0, "logprobs": True, "min_tokens": 8})
        free = server.submit("free", ids, {"max_tokens": 12, "temperature": 0, "logprobs": True})
        held, free = held.result(timeout=RESULT_TIMEOUT_S), free.result(timeout=RESULT_TIMEOUT_S)
    assert len(free.token_ids) == 5 and free.stop_reason == "stop"
    assert len(held.token_ids) >= 8 and not set(held.token_ids[:8]) & set(engine.eos_token_ids)
    assert held.token_ids[:4] == free.token_ids[:4]
    full = torch.log_softmax(model(torch.tensor([ids + held.token_ids])).logits[0, len(ids) - 1 : -1].float(), -1)
    expected = full.gather(-1, torch.tensor(held.token_ids)[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(held.log_probs), expected, atol=1e-4, rtol=0)


def test_on_idle_runs_when_the_engine_runs_out_of_work(model, tokenizer):
    """The OpenAI server passes ``release_free_memory`` here: called once a burst is done, not between steps."""
    import threading

    from hybridrl.workers.rollout.async_server import build_async_server

    engine = hf_engine(model, tokenizer, response_length=8)
    idle = threading.Event()
    calls = []

    def on_idle():
        calls.append([f.done() for f in futures])
        idle.set()

    server = build_async_server(engine, engine.rollout_config, on_idle=on_idle)
    server.start()
    try:
        futures = [
            server.submit(f"r{i}", prompt_ids(tokenizer, QUESTIONS[i]), {"max_tokens": 4 + 3 * i, "ignore_eos": True})
            for i in range(2)
        ]
        [f.result(timeout=RESULT_TIMEOUT_S) for f in futures]
        assert idle.wait(timeout=RESULT_TIMEOUT_S)
    finally:
        server.stop()
    assert calls == [[True, True]]  # once, after both finished (r0 finishing first left r1 running: not idle)
