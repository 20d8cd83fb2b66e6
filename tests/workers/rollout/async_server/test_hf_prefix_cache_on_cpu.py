"""Conversation prefix caching of the hf async server on the tiny model: a cached turn prefills only its new
suffix and gives the same greedy tokens and log-probs as a full prefill (with caching off, and one request at a
time through ``HFRollout``); prompts that do not extend the cached ids fall back to a full prefill; ``stop()``
clears the cache; the LRU keeps its bounds."""

from __future__ import annotations

import contextlib

import pytest
import torch
from async_server_testlib import (
    QUESTIONS,
    hf_engine,
    one_at_a_time_greedy_ids,
    prompt_ids,
    serving,
    spread_weights,
    top2_margin,
)

from hybridrl.generation.sampling import resolve_request_params
from hybridrl.workers.rollout.async_server.engine_loop import ServerRequest
from hybridrl.workers.rollout.async_server.hf_batcher import HFBatcher
from hybridrl.workers.rollout.async_server.prefix_cache import CachedPrefix, ConversationPrefixCache

RESULT_TIMEOUT_S = 120
TOOL_TEXTS = {"A": "result: 1234", "B": "the calculator returned 99 then 17", "C": "ok"}
MAX_TOKENS = {"A": [4, 6, 3], "B": [7, 2, 5], "C": [3, 8, 4], "D": [5]}  # per turn; D joins at turn 2


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return spread_weights(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval())


@contextlib.contextmanager
def fed_shapes(model):
    """Collect the ``input_ids`` shape of every forward of ``model`` (tokens fed per call)."""
    shapes: list[tuple[int, int]] = []
    handle = model.register_forward_pre_hook(
        lambda _m, _args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        yield shapes
    finally:
        handle.remove()


def _tool_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _greedy_request(engine, request_id: str, turn: int, prompt: list[int], max_tokens: int) -> ServerRequest:
    params = resolve_request_params(
        {"max_tokens": max_tokens, "temperature": 0, "logprobs": True, "ignore_eos": True},
        engine.rollout_config,
        eos_token_ids=engine.eos_token_ids,
        pad_token_id=engine.pad_token_id,
    )
    return ServerRequest(key=f"{request_id}#{turn}", request_id=request_id, prompt_ids=list(prompt), params=params)


def _run(batcher: HFBatcher, requests: list[ServerRequest]) -> dict:
    for request in requests:
        batcher.add(request)
    outputs = {}
    while batcher.has_work():
        outputs.update({request.request_id: output for request, output in batcher.step()})
    return outputs


def _play(engine, tokenizer, batcher: HFBatcher) -> list[tuple[str, list[int], object]]:
    """Conversations A (short chat prompt), B (long chat prompt, long tool replies), C (3-token prompt, 1-token
    tool replies) for 3 turns, all admitted together each turn; D (fresh) joins the resumed ones at turn 2.
    Returns ``(request_id, prompt, TokenOutput)`` of every turn."""
    contexts = {"A": prompt_ids(tokenizer, QUESTIONS[0]), "B": prompt_ids(tokenizer, QUESTIONS[4]), "C": [5, 6, 7]}
    played = []
    for turn in range(3):
        requests = [_greedy_request(engine, c, turn, contexts[c], MAX_TOKENS[c][turn]) for c in "ABC"]
        if turn == 1:
            requests.append(_greedy_request(engine, "D", turn, prompt_ids(tokenizer, QUESTIONS[3]), 5))
        outputs = _run(batcher, requests)
        for request in requests:
            output = outputs[request.request_id]
            played.append((request.request_id, request.prompt_ids, output))
            if request.request_id in contexts:
                contexts[request.request_id] += output.token_ids + _tool_ids(tokenizer, TOOL_TEXTS[request.request_id])
    return played


def test_three_turn_conversations_match_a_full_prefill_and_one_at_a_time_generation(model, tokenizer):
    engine = hf_engine(model, tokenizer, response_length=8)
    cached = HFBatcher(engine, max_num_seqs=8, max_prefill_tokens=8192)
    uncached = HFBatcher(engine, max_num_seqs=8, max_prefill_tokens=8192, prefix_cache=ConversationPrefixCache(0, 0))
    with fed_shapes(model) as cached_shapes:
        with_cache = _play(engine, tokenizer, cached)
    with fed_shapes(model) as uncached_shapes:
        without_cache = _play(engine, tokenizer, uncached)
    assert len(uncached.prefix_cache) == 0 and set(cached.prefix_cache._entries) == {"A", "B", "C", "D"}
    # turns 2 and 3 prefill resumed A, B, C as [3, S], S = B's suffix (its last response token + its tool reply)
    tool_b, tool_c = (len(_tool_ids(tokenizer, TOOL_TEXTS[c])) for c in "BC")
    assert cached_shapes.count((3, 1 + tool_b)) == 2 and 1 + tool_b != len(with_cache[1][1])  # not B's 1st prompt
    assert 3 + 3 + tool_c < 1 + tool_b  # C's whole turn-2 prompt is shorter than S: left-padded, nothing reused
    assert sum(r * c for r, c in cached_shapes) < sum(r * c for r, c in uncached_shapes)
    for (rid, prompt, out), (rid2, prompt2, ref) in zip(with_cache, without_cache, strict=True):
        assert (rid, prompt) == (rid2, prompt2)
        assert out.token_ids == ref.token_ids, rid
        torch.testing.assert_close(torch.tensor(out.log_probs), torch.tensor(ref.log_probs), atol=1e-4, rtol=0)
        alone_tokens, alone_log_probs = one_at_a_time_greedy_ids(engine, prompt, len(ref.token_ids))
        assert out.token_ids == alone_tokens, rid
        torch.testing.assert_close(torch.tensor(out.log_probs), alone_log_probs, atol=1e-4, rtol=0)
        assert top2_margin(model, prompt, alone_tokens) > 1e-3  # no argmax near-tie decided the comparison
    assert [len(p) for rid, p, _ in with_cache if rid == "C"] == [3, 3 + 3 + tool_c, 3 + 3 + tool_c + 8 + tool_c]


def _turn(server, request_id: str, prompt: list[int], max_tokens: int):
    params = {"max_tokens": max_tokens, "temperature": 0, "logprobs": True, "ignore_eos": True}
    return server.submit(request_id, prompt, params).result(timeout=RESULT_TIMEOUT_S)


def test_a_cached_turn_prefills_only_its_new_suffix(model, tokenizer):
    engine = hf_engine(model, tokenizer, response_length=8)
    tool = _tool_ids(tokenizer, TOOL_TEXTS["A"])
    first = prompt_ids(tokenizer, QUESTIONS[1])
    with serving(engine) as server:  # the default server caches
        response = _turn(server, "conv", first, 5).token_ids
        entry = server.step_engine.prefix_cache._entries["conv"]
        assert entry.token_ids == first + response[:-1]  # the last sampled token was never fed
        assert entry.layers[0][0].shape == (1, len(first) + 4, 32)  # keys [kv heads, L, head_dim]
        second = first + response + tool
        with fed_shapes(model) as shapes:
            out = _turn(server, "conv", second, 5)
    assert shapes == [(1, 1 + len(tool))] + [(1, 1)] * 4  # the last response token + the tool, then 4 decodes
    alone_tokens, alone_log_probs = one_at_a_time_greedy_ids(engine, second, 5)
    assert out.token_ids == alone_tokens
    torch.testing.assert_close(torch.tensor(out.log_probs), alone_log_probs, atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", ["other_prompt", "shorter_prompt", "same_ids"])
def test_a_prompt_that_does_not_extend_the_cached_ids_falls_back(model, tokenizer, case):
    engine = hf_engine(model, tokenizer, response_length=8)
    first = prompt_ids(tokenizer, QUESTIONS[2])
    with serving(engine) as server:
        response = _turn(server, "conv", first, 6).token_ids
        cached_ids = first + response[:-1]
        prompt = {
            "other_prompt": [first[0] + 1] + cached_ids[1:] + [9],  # first token differs
            "shorter_prompt": first[:-1],  # a prefix of the cached ids
            "same_ids": cached_ids,  # exactly the cached ids: reuse all but the last one
        }[case]
        with fed_shapes(model) as shapes:
            out = _turn(server, "conv", prompt, 3)
        assert server.step_engine.prefix_cache._entries["conv"].token_ids == prompt + out.token_ids[:-1]
    assert shapes[0] == ((1, 1) if case == "same_ids" else (1, len(prompt)))
    alone_tokens, alone_log_probs = one_at_a_time_greedy_ids(engine, prompt, 3)
    assert out.token_ids == alone_tokens
    torch.testing.assert_close(torch.tensor(out.log_probs), alone_log_probs, atol=1e-4, rtol=0)


def test_stop_clears_the_cache(model, tokenizer):
    engine = hf_engine(model, tokenizer, response_length=8)
    first = prompt_ids(tokenizer, QUESTIONS[0])
    with serving(engine) as server:
        response = _turn(server, "conv", first, 4).token_ids
        _turn(server, "other", prompt_ids(tokenizer, QUESTIONS[1]), 2)
        assert len(server.step_engine.prefix_cache) == 2
        server.stop()  # the worker stops the server before sleep / weight sync
        assert len(server.step_engine.prefix_cache) == 0 and server.step_engine.prefix_cache.total_tokens == 0
        server.start()
        second = first + response + [7, 8]
        with fed_shapes(model) as shapes:
            _turn(server, "conv", second, 2)
    assert shapes[0] == (1, len(second))  # full prefill


def _entry(length: int) -> CachedPrefix:
    return CachedPrefix(list(range(length)), [(torch.zeros(1, length, 2), torch.zeros(1, length, 2))])


def test_the_lru_keeps_its_bounds():
    by_entries = ConversationPrefixCache(max_entries=2, max_tokens=100)
    for request_id in "abc":
        by_entries.put(request_id, _entry(3))
    assert list(by_entries._entries) == ["b", "c"] and by_entries.total_tokens == 6
    by_entries.put("b", _entry(5))  # re-stored: newest
    by_entries.put("d", _entry(1))
    assert list(by_entries._entries) == ["b", "d"] and by_entries.total_tokens == 6

    by_tokens = ConversationPrefixCache(max_entries=10, max_tokens=10)
    for request_id in "abc":
        by_tokens.put(request_id, _entry(4))
    assert list(by_tokens._entries) == ["b", "c"] and by_tokens.total_tokens == 8
    by_tokens.put("c", _entry(11))  # longer than the bound alone: not stored, the old one dropped
    assert list(by_tokens._entries) == ["b"] and by_tokens.total_tokens == 4
    by_tokens.put("e", _entry(10))
    assert list(by_tokens._entries) == ["e"] and by_tokens.total_tokens == 10

    off = ConversationPrefixCache(0, 0)
    off.put("a", _entry(2))
    assert len(off) == 0 and not off.enabled
    with pytest.raises(ValueError, match="prefix cache bounds"):
        ConversationPrefixCache(-1, 10)


def test_take_matches_only_prompts_that_extend_the_cached_ids():
    cache = ConversationPrefixCache(max_entries=4, max_tokens=100)
    cache.put("a", _entry(4))  # ids 0 1 2 3
    assert cache.peek_usable("a", [0, 1, 2, 3, 9, 9]) == 4 and "a" in cache  # peek keeps the entry
    assert cache.peek_usable("a", [0, 1, 2, 3]) == 3  # one token left to prefill
    assert cache.peek_usable("a", [0, 1, 2]) == 0 and cache.peek_usable("a", [0, 1, 5, 3, 4]) == 0
    assert cache.peek_usable("zzz", [0, 1, 2, 3, 4]) == 0
    entry, usable = cache.take("a", [0, 1, 2, 3, 4])
    assert usable == 4 and entry.token_ids == [0, 1, 2, 3] and "a" not in cache and cache.total_tokens == 0
    cache.put("a", _entry(4))
    assert cache.take("a", [7, 1, 2, 3, 4]) == (None, 0) and "a" not in cache  # a stale entry is dropped too
