"""Every error answer is an OpenAI error object ``{"error": {message, type, param, code}}`` with its status;
the ``openai`` client raises the matching exception class. No failing request reaches the engine."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import openai
import pytest
from serving_testlib import API_KEY, LIMITS, MODEL, ScriptedGenerate, asgi_http_client, make_app, openai_client

MESSAGES = [{"role": "user", "content": "hello"}]
ERROR_KEYS = {"message", "type", "param", "code"}


def post(app, path, *, json=None, content=None, headers=None) -> httpx.Response:
    """One raw POST with the API key (unless ``headers`` replace it)."""

    async def main():
        async with asgi_http_client(app) as http:
            sent = {"Authorization": f"Bearer {API_KEY}"} if headers is None else headers
            return await http.post(path, json=json, content=content, headers=sent)

    return asyncio.run(main())


def error_of(reply: httpx.Response, status: int) -> dict:
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS
    return body["error"]


@pytest.fixture()
def engine(tokenizer):
    return ScriptedGenerate(tokenizer, ["fine"])


@pytest.fixture()
def app(engine, tokenizer):
    return make_app(engine, tokenizer)


def client_error(app, **request):
    """The exception the openai client raises for a chat request (model and messages defaulted)."""

    async def main():
        async with openai_client(app) as client:
            await client.chat.completions.create(**{"model": MODEL, "messages": MESSAGES, **request})

    with pytest.raises(openai.APIStatusError) as caught:
        asyncio.run(main())
    return caught.value


def test_bad_json_is_400(app, engine):
    error = error_of(post(app, "/v1/chat/completions", content=b'{"model": "tiny-chat", "messages": [}'), 400)
    assert error["type"] == "invalid_request_error" and "not valid JSON" in error["message"]
    error = error_of(post(app, "/v1/completions", content=b"[1, 2]"), 400)
    assert "must be a JSON object" in error["message"]
    assert engine.calls == []


def test_invalid_fields_are_400_naming_the_field(app, engine):
    error = error_of(
        post(app, "/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES, "temperature": 5}), 400
    )
    assert error["param"] == "temperature"
    error = error_of(post(app, "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "robot"}]}), 400)
    assert error["param"] == "messages.0.role"
    error = error_of(post(app, "/v1/chat/completions", json={"messages": MESSAGES}), 400)
    assert error["param"] == "model"
    assert engine.calls == []


def test_unknown_model_is_404(app, engine):
    error = client_error(app, model="gpt-4o")
    assert isinstance(error, openai.NotFoundError) and error.status_code == 404
    assert error.body["code"] == "model_not_found" and error.body["param"] == "model"
    assert f"'{MODEL}'" in error.body["message"]
    assert engine.calls == []


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_over_the_limit_is_400(app, engine, field):
    error = client_error(app, **{field: LIMITS.max_tokens + 1})
    assert isinstance(error, openai.BadRequestError) and error.body["param"] == field
    assert f"at most {LIMITS.max_tokens}" in error.body["message"]
    assert engine.calls == []


def test_completions_max_tokens_over_the_limit_is_400(app):
    error = error_of(post(app, "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 10_000}), 400)
    assert error["param"] == "max_tokens"


def test_a_prompt_over_the_limit_is_400_context_length_exceeded(app, engine):
    error = client_error(app, messages=[{"role": "user", "content": "what is the sum " * 400}])
    assert isinstance(error, openai.BadRequestError)
    assert error.body["code"] == "context_length_exceeded" and error.body["param"] == "messages"
    assert f"at most {LIMITS.max_prompt_tokens}" in error.body["message"]
    assert engine.calls == []


def test_prompts_and_max_tokens_beyond_the_models_context_are_400(engine, tokenizer):
    app = make_app(engine, tokenizer, limits=dataclasses.replace(LIMITS, context_length=64))  # prompt limit 1000

    def complete(prompt_length, **fields):
        return post(app, "/v1/completions", json={"model": MODEL, "prompt": [1] * prompt_length, **fields})

    error = error_of(complete(64), 400)  # no room left for one generated token
    assert error["code"] == "context_length_exceeded" and error["param"] == "prompt"
    assert "at most 63 (rollout.prompt_length, clamped to the model's 64-token context)" in error["message"]
    error = error_of(complete(40, max_tokens=30), 400)
    assert error["code"] == "context_length_exceeded" and error["param"] == "max_tokens"
    assert "at most 24" in error["message"]
    assert engine.calls == []
    assert complete(63).status_code == 200 and complete(40, max_tokens=24).status_code == 200
    assert [call[2]["max_tokens"] for call in engine.calls] == [1, 24]  # an absent max_tokens fills the room left


def test_a_body_over_the_limit_is_413(app, engine):
    big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * LIMITS.max_request_bytes}]}
    error = error_of(post(app, "/v1/chat/completions", json=big), 413)
    assert error["code"] == "request_too_large"

    async def chunked():  # no Content-Length: the streamed body is counted
        yield b'{"model": "tiny-chat", "messages": [{"role": "user", "content": "'
        yield b"x" * LIMITS.max_request_bytes
        yield b'"}]}'

    error_of(post(app, "/v1/chat/completions", content=chunked()), 413)
    assert engine.calls == []


def test_missing_or_wrong_api_key_is_401(app, engine):
    error = error_of(post(app, "/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES}, headers={}), 401)
    assert error["code"] == "invalid_api_key"
    error_of(
        post(
            app,
            "/v1/chat/completions",
            json={"model": MODEL, "messages": MESSAGES},
            headers={"Authorization": "Bearer nope"},
        ),
        401,
    )

    async def main():
        async with openai_client(app, api_key="sk-wrong") as client:
            await client.models.list()

    with pytest.raises(openai.AuthenticationError):
        asyncio.run(main())
    assert engine.calls == []


def test_an_engine_failure_is_500(tokenizer):
    app = make_app(ScriptedGenerate(tokenizer, ["x"], error=RuntimeError("CUDA out of memory")), tokenizer)
    error = client_error(app)
    assert isinstance(error, openai.InternalServerError) and error.status_code == 500
    assert error.body["type"] == "server_error"
    assert "RuntimeError: CUDA out of memory" in error.body["message"]


@pytest.mark.parametrize(
    ("request_fields", "param"),
    [
        ({"n": LIMITS.max_n + 1}, "n"),
        ({"logprobs": True, "top_logprobs": 2}, "top_logprobs"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"seed": 2**63}, "seed"),  # beyond int64: the engine's generator cannot take it
        ({"seed": -(2**63) - 1}, "seed"),
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": "x"}}}
                ]
            },
            "tools.0.function.parameters",
        ),  # not a JSON Schema: required must be an array
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "strnig"}}}]},
            "tools.0.function.parameters",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
            "tools.0.function.parameters",
        ),  # a schema, but not of an object
    ],
)
def test_unsupported_or_out_of_range_fields_are_400(app, engine, request_fields, param):
    error = client_error(app, **request_fields)
    assert isinstance(error, openai.BadRequestError) and error.body["param"] == param
    assert engine.calls == []


def test_an_invalid_tool_schema_is_named_with_where_it_is_wrong(app):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": "x"}}}
    error = client_error(app, tools=[tool])
    assert error.body["message"] == (
        "'tools.0.function.parameters': not a valid JSON Schema (at required): 'x' is not of type 'array'"
    )


def test_completions_refuse_alternatives_and_out_of_vocabulary_ids(app, engine, tokenizer):
    error = error_of(post(app, "/v1/completions", json={"model": MODEL, "prompt": "hi", "logprobs": 2}), 400)
    assert error["param"] == "logprobs" and "logprobs=0" in error["message"]
    error = error_of(post(app, "/v1/completions", json={"model": MODEL, "prompt": [1, len(tokenizer)]}), 400)
    assert error["param"] == "prompt"
    assert engine.calls == []


def test_unknown_routes_are_openai_404s(app):
    error = error_of(post(app, "/v1/embeddings", json={}), 404)
    assert error["code"] == "not_found"
