"""End to end over the real engine: ``hybridrl.serve.build_engine`` (tiny model, hf) + its async server +
the app, with the real ``openai`` client. Returned and recorded tokens/log-probs are the engine's."""

from __future__ import annotations

import asyncio

import openai
import pytest
import torch
from serving_testlib import ListRecorder, make_app, openai_client

from hybridrl.config import compose_config
from hybridrl.generation.chat_tokens import ChatTokens
from hybridrl.serve import build_engine, serve_limits, served_model_name
from hybridrl.workers.rollout.async_server import build_async_server

MESSAGES = [{"role": "user", "content": "What is the sum of 7 and 8?"}]
RESPONSE_LENGTH = 12


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    """``(config, server, tokenizer)``: a started async server on the standalone hf engine of serve.yaml."""
    overrides = [
        f"model.path={tiny_model_dir}",
        "trainer.device=cpu",
        "rollout.name=hf",
        "rollout.dtype=float32",
        f"rollout.response_length={RESPONSE_LENGTH}",
        "rollout.prompt_length=4096",  # over the tiny model's 1024 positions: the server clamps it
        "rollout.max_num_seqs=8",
    ]
    config = compose_config("serve", overrides)
    engine, tokenizer, rollout_config = build_engine(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # spread the init (std 0.02 repeats one token) so continuations depend on the context
        for param in engine.model.parameters():
            if param.dim() > 1:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    server = build_async_server(engine, rollout_config)
    server.start()
    yield config, server, tokenizer
    server.stop()


def app_of(served, recorder, tokenizer=None):
    config, server, engine_tokenizer = served
    limits = serve_limits(config, config.rollout)
    return make_app(
        server.generate,
        tokenizer or engine_tokenizer,
        recorder=recorder,
        model_name=served_model_name(config),
        limits=limits,
    )


def chat(app, model, **request):
    async def main():
        async with openai_client(app) as client:
            return await client.chat.completions.create(model=model, messages=MESSAGES, **request)

    return asyncio.run(main())


def direct(server, prompt_ids, **params):
    """The async server's own answer for ``prompt_ids`` (the reference)."""
    return asyncio.run(server.generate("ref", prompt_ids, {"max_tokens": RESPONSE_LENGTH, "logprobs": True, **params}))


def test_greedy_chat_returns_and_records_the_engines_tokens(served):
    config, server, tokenizer = served
    recorder = ListRecorder()
    model = served_model_name(config)
    response = chat(app_of(served, recorder), model, n=2, temperature=0, logprobs=True)
    prompt_ids = ChatTokens(tokenizer).prompt_ids(MESSAGES)
    reference = direct(server, prompt_ids, temperature=0)
    assert len(reference.token_ids) > 3
    for choice, (_, record) in zip(response.choices, recorder.records):
        assert record.prompt_ids == prompt_ids and record.response_ids == reference.token_ids
        returned = [entry.logprob for entry in choice.logprobs.content]
        assert returned == record.response_logprobs  # exactly what was recorded
        torch.testing.assert_close(torch.tensor(returned), torch.tensor(reference.log_probs), atol=1e-4, rtol=0)
        assert choice.message.content == tokenizer.decode(reference.token_ids, skip_special_tokens=True)
        assert choice.finish_reason == {"stop": "stop", "length": "length"}[reference.stop_reason]
    assert response.usage.completion_tokens == 2 * len(reference.token_ids)


def test_seeded_sampling_gives_choice_i_the_seed_plus_i_sample(served):
    config, server, tokenizer = served
    recorder = ListRecorder()
    chat(app_of(served, recorder), served_model_name(config), n=2, temperature=1.0, top_p=1.0, seed=5)
    prompt_ids = ChatTokens(tokenizer).prompt_ids(MESSAGES)
    samples = [direct(server, prompt_ids, temperature=1.0, top_p=1.0, top_k=-1, seed=s).token_ids for s in (5, 6)]
    assert [record.response_ids for _, record in recorder.records] == samples
    assert samples[0] != samples[1]


def test_streaming_over_the_engine_assembles_the_greedy_message(served, tools_tokenizer):
    config, server, _ = served
    recorder = ListRecorder()
    app = app_of(served, recorder, tokenizer=tools_tokenizer)  # same vocabulary, a template with tools
    calculator = {"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}

    async def main():
        async with openai_client(app) as client:
            stream = await client.chat.completions.create(
                model=served_model_name(config), messages=MESSAGES, tools=[calculator], temperature=0, stream=True
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    content = asyncio.run(main())
    prompt_ids = ChatTokens(tools_tokenizer, tools=[calculator]).prompt_ids(MESSAGES)
    reference = direct(server, prompt_ids, temperature=0)
    ((_, record),) = recorder.records
    assert record.prompt_ids == prompt_ids and record.response_ids == reference.token_ids
    assert content == tools_tokenizer.decode(reference.token_ids, skip_special_tokens=True)


def test_a_prompt_beyond_the_models_context_is_a_400_not_an_engine_error(served):
    config, _, _ = served  # rollout.prompt_length=4096, the tiny model has 1024 positions

    async def main():
        async with openai_client(app_of(served, None)) as client:
            long = [{"role": "user", "content": "seven " * 1100}]
            await client.chat.completions.create(model=served_model_name(config), messages=long)

    with pytest.raises(openai.BadRequestError) as caught:
        asyncio.run(main())
    assert caught.value.body["code"] == "context_length_exceeded"
    assert "at most 1023 (rollout.prompt_length, clamped to the model's 1024-token context)" in caught.value.message
