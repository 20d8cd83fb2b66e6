"""The OpenAI-compatible app with the real ``openai`` client and a scripted engine: prompts are ChatTokens'
ids, request fields reach the engine, responses/log-probs/records carry the engine's tokens, streaming."""

from __future__ import annotations

import asyncio

import httpx
from serving_testlib import LIMITS, MODEL, ListRecorder, ScriptedGenerate, make_app, openai_client

from hybridrl.generation.chat_tokens import ChatTokens
from hybridrl.serving import TRAJECTORY_HEADER

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 1 + 2?"}]


def run(coroutine_function, app, **client_kwargs):
    """``await coroutine_function(client)`` with an ``openai.AsyncOpenAI`` on ``app``."""

    async def main():
        async with openai_client(app, **client_kwargs) as client:
            return await coroutine_function(client)

    return asyncio.run(main())


def test_models_lists_the_served_model(tokenizer):
    app = make_app(ScriptedGenerate(tokenizer, ["x"]), tokenizer)

    async def call(client):
        return await client.models.list(), await client.models.retrieve(MODEL)

    listed, model = run(call, app)
    assert [m.id for m in listed.data] == [MODEL]
    assert model.id == MODEL and model.owned_by == "hybridrl"


def test_chat_prompt_is_chat_tokens_and_the_reply_the_engine_ids(tokenizer):
    generate = ScriptedGenerate(tokenizer, ["The answer is 3."])
    app = make_app(generate, tokenizer)
    response = run(lambda c: c.chat.completions.create(model=MODEL, messages=MESSAGES), app)
    ((request_id, prompt_ids, params),) = generate.calls
    assert prompt_ids == ChatTokens(tokenizer).prompt_ids(MESSAGES)
    # nothing set by the client: the server's limit, no log-probs (no recorder), the rest left to the rollout config
    assert params == {"max_tokens": LIMITS.max_tokens, "logprobs": False, "seed": None}
    choice = response.choices[0]
    assert choice.message.content == "The answer is 3." and choice.message.role == "assistant"
    assert choice.finish_reason == "stop" and choice.logprobs is None and choice.message.tool_calls is None
    engine_ids = generate.outputs[0].token_ids  # the reply's ids + <|im_end|>
    assert response.usage.prompt_tokens == len(prompt_ids)
    assert response.usage.completion_tokens == len(engine_ids)
    assert response.usage.total_tokens == len(prompt_ids) + len(engine_ids)
    assert response.model == MODEL and response.id.startswith("chatcmpl-")
    assert request_id.startswith("traj-")


def test_sampling_fields_and_n_reach_the_engine_with_seed_plus_i(tokenizer):
    generate = ScriptedGenerate(tokenizer, ["a", "b", "c"])
    app = make_app(generate, tokenizer)
    response = run(
        lambda c: c.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            n=3,
            temperature=0.5,
            top_p=0.9,
            max_completion_tokens=7,
            seed=11,
            extra_body={"top_k": 5},
        ),
        app,
    )
    expected = {"max_tokens": 7, "logprobs": False, "temperature": 0.5, "top_p": 0.9, "top_k": 5}
    assert [params for _, _, params in generate.calls] == [{**expected, "seed": s} for s in (11, 12, 13)]
    assert len({request_id for request_id, _, _ in generate.calls}) == 1  # one trajectory: sticky routing
    assert [(c.index, c.message.content) for c in response.choices] == [(0, "a"), (1, "b"), (2, "c")]


def test_logprobs_returned_and_recorded_are_the_engines(tokenizer):
    generate, recorder = ScriptedGenerate(tokenizer, ["12 plus 3", "15"]), ListRecorder()
    app = make_app(generate, tokenizer, recorder=recorder)
    response = run(
        lambda c: c.chat.completions.create(
            model=MODEL, messages=MESSAGES, n=2, logprobs=True, extra_headers={TRAJECTORY_HEADER: "game-7"}
        ),
        app,
    )
    prompt_ids = ChatTokens(tokenizer).prompt_ids(MESSAGES)
    assert [trajectory for trajectory, _ in recorder.records] == ["game-7", "game-7"]
    for choice, output, (_, record) in zip(response.choices, generate.outputs, recorder.records):
        returned = [entry.logprob for entry in choice.logprobs.content]
        assert returned == output.log_probs == record.response_logprobs  # e.g. [-0.1, -0.11, ...] exactly
        assert [entry.token for entry in choice.logprobs.content] == [tokenizer.decode([i]) for i in output.token_ids]
        assert all(entry.top_logprobs == [] for entry in choice.logprobs.content)
        assert record.response_ids == output.token_ids and record.prompt_ids == prompt_ids
        assert record.choice_index == choice.index and record.finish_reason == "stop"
        assert record.request_messages == MESSAGES and record.tools is None
    # the recorder gets log-probs even when the client does not ask for them
    response = run(lambda c: c.chat.completions.create(model=MODEL, messages=MESSAGES), app)
    assert generate.calls[-1][2]["logprobs"] is True and response.choices[0].logprobs is None
    assert recorder.records[-1][1].response_logprobs == generate.outputs[-1].log_probs


def test_trajectory_id_header_then_user_then_metadata_then_fresh(tokenizer):
    generate = ScriptedGenerate(tokenizer, ["ok"])
    app = make_app(generate, tokenizer, api_key=None)
    base = {"model": MODEL, "messages": MESSAGES}
    cases = [
        ({TRAJECTORY_HEADER: "h1"}, {"user": "u1", "metadata": {"trajectory_id": "m1"}}, "h1"),
        ({}, {"user": "u1", "metadata": {"trajectory_id": "m1"}}, "u1"),
        ({}, {"metadata": {"trajectory_id": "m1"}}, "m1"),
    ]

    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            seen = []
            for headers, extra, _ in [*cases, ({}, {}, None)]:
                reply = await http.post("/v1/chat/completions", json={**base, **extra}, headers=headers)
                assert reply.status_code == 200
                seen.append(reply.headers[TRAJECTORY_HEADER])
            return seen

    seen = asyncio.run(main())
    assert seen[:3] == [expected for _, _, expected in cases]
    assert seen[3].startswith("traj-")
    assert [request_id for request_id, _, _ in generate.calls] == seen


def test_stop_string_cuts_the_text_and_keeps_the_ids_through_it(tokenizer):
    generate, recorder = ScriptedGenerate(tokenizer, ["The answer is 42. #### 42"]), ListRecorder()
    app = make_app(generate, tokenizer, recorder=recorder)
    response = run(lambda c: c.chat.completions.create(model=MODEL, messages=MESSAGES, stop=["####", "zzz"]), app)
    choice, record = response.choices[0], recorder.records[0][1]
    assert choice.message.content == "The answer is 42. " and choice.finish_reason == "stop"
    engine_ids, kept = generate.outputs[0].token_ids, record.response_ids
    assert kept == engine_ids[: len(kept)] and len(kept) < len(engine_ids)
    assert "####" in tokenizer.decode(kept) and "####" not in tokenizer.decode(kept[:-1])
    assert record.response_logprobs == generate.outputs[0].log_probs[: len(kept)]
    assert response.usage.completion_tokens == len(kept)


def _chunks_by_choice(chunks):
    content, finish, roles = {}, {}, {}
    for chunk in chunks:
        for choice in chunk.choices:
            content[choice.index] = content.get(choice.index, "") + (choice.delta.content or "")
            roles.setdefault(choice.index, choice.delta.role)
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    return content, finish, roles


def test_streaming_chunks_assemble_to_the_messages(tokenizer):
    generate = ScriptedGenerate(tokenizer, ["first answer", "second answer"])
    app = make_app(generate, tokenizer)

    async def call(client):
        stream = await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, n=2, stream=True, stream_options={"include_usage": True}
        )
        return [chunk async for chunk in stream]

    chunks = run(call, app)
    content, finish, roles = _chunks_by_choice(chunks)
    assert content == {0: "first answer", 1: "second answer"}
    assert finish == {0: "stop", 1: "stop"} and roles == {0: "assistant", 1: "assistant"}
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == sum(len(o.token_ids) for o in generate.outputs)


def test_completions_take_text_or_token_prompts(tokenizer):
    generate, recorder = ScriptedGenerate(tokenizer, ["4", "5", "6", "7"]), ListRecorder()
    app = make_app(generate, tokenizer, recorder=recorder)
    ids = tokenizer.encode("What is 2 + 2?")

    async def call(client):
        text = await client.completions.create(model=MODEL, prompt="What is 2 + 2?", logprobs=0)
        many = await client.completions.create(model=MODEL, prompt=[ids, [5, 6, 7]], n=2, max_tokens=3)
        return text, many

    text, many = run(call, app)
    assert generate.calls[0][1] == ids and generate.calls[0][2]["max_tokens"] == 16  # OpenAI's default
    assert text.choices[0].text == "4" and text.object == "text_completion"
    assert text.choices[0].logprobs.token_logprobs == generate.outputs[0].log_probs
    assert sorted(call[1] for call in generate.calls[1:]) == sorted([ids, ids, [5, 6, 7], [5, 6, 7]])
    assert [c.index for c in many.choices] == [0, 1, 2, 3]
    assert many.usage.prompt_tokens == len(ids) + 3
    assert [r.prompt_ids for _, r in recorder.records[1:]] == [ids, ids, [5, 6, 7], [5, 6, 7]]
    assert all(r.request_messages is None for _, r in recorder.records)


def test_completions_stream(tokenizer):
    app = make_app(ScriptedGenerate(tokenizer, ["streamed text"]), tokenizer)

    async def call(client):
        stream = await client.completions.create(model=MODEL, prompt="hello", stream=True)
        return [chunk async for chunk in stream]

    chunks = run(call, app)
    assert "".join(c.choices[0].text for c in chunks) == "streamed text"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_health_needs_no_api_key(tokenizer):
    app = make_app(ScriptedGenerate(tokenizer, ["x"]), tokenizer)

    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            return await http.get("/health")

    reply = asyncio.run(main())  # the app requires API_KEY on /v1 routes only (see the error tests)
    assert reply.status_code == 200 and reply.json() == {"status": "ok"}


def test_logprob_bytes_are_the_tokens_raw_bytes(tokenizer):
    text = "héllo wörld 日本"  # multi-byte characters split across byte-level tokens
    generate = ScriptedGenerate(tokenizer, [text])
    app = make_app(generate, tokenizer)
    response = run(lambda c: c.chat.completions.create(model=MODEL, messages=MESSAGES, logprobs=True), app)
    entries = response.choices[0].logprobs.content
    assert any(entry.token == "\ufffd" for entry in entries)  # a token holding part of a character
    assert b"".join(bytes(entry.bytes) for entry in entries) == (text + "<|im_end|>").encode("utf-8")
