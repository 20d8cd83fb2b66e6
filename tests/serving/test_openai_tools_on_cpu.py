"""Tool calling through the endpoint (Qwen2.5-style hermes template, scripted engine): tools rendered into the
prompt, ``<tool_call>`` blocks returned as OpenAI ``tool_calls``, the call's result sent back next turn."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from serving_testlib import MODEL, ListRecorder, ScriptedGenerate, make_app, openai_client

from hybridrl.generation.chat_tokens import ChatTokens

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
CALL_TEXT = 'Let me compute.<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*7"}}\n</tool_call>'
QUESTION = [{"role": "user", "content": "What is 12 * 7?"}]


def run(coroutine_function, app):
    async def main():
        async with openai_client(app) as client:
            return await coroutine_function(client)

    return asyncio.run(main())


def test_tool_call_text_becomes_openai_tool_calls(tools_tokenizer):
    generate, recorder = ScriptedGenerate(tools_tokenizer, [CALL_TEXT]), ListRecorder()
    app = make_app(generate, tools_tokenizer, recorder=recorder)
    response = run(lambda c: c.chat.completions.create(model=MODEL, messages=QUESTION, tools=[CALCULATOR]), app)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me compute."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "calculator" and json.loads(call.function.arguments) == {"expression": "12*7"}
    prompt_ids = generate.calls[0][1]
    assert prompt_ids == ChatTokens(tools_tokenizer, tools=[CALCULATOR]).prompt_ids(QUESTION)
    assert '<tools>\n{"type": "function", "function": {"name": "calculator"' in tools_tokenizer.decode(prompt_ids)
    record = recorder.records[0][1]
    assert record.tools == [CALCULATOR] and record.finish_reason == "tool_calls"
    assert record.response_ids == generate.outputs[0].token_ids  # the call's tokens, verbatim


def test_the_tool_result_turn_renders_the_structured_call_and_response(tools_tokenizer):
    generate = ScriptedGenerate(tools_tokenizer, [CALL_TEXT, "12 * 7 = 84."])
    app = make_app(generate, tools_tokenizer)

    async def two_turns(client):
        first = await client.chat.completions.create(model=MODEL, messages=QUESTION, tools=[CALCULATOR])
        message = first.choices[0].message
        history = [
            *QUESTION,
            message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "84"},
        ]
        return await client.chat.completions.create(model=MODEL, messages=history, tools=[CALCULATOR])

    second = run(two_turns, app)
    assert second.choices[0].message.content == "12 * 7 = 84." and second.choices[0].finish_reason == "stop"
    prompt = tools_tokenizer.decode(generate.calls[1][1])
    # the arguments string was decoded for the template, which re-serializes the object
    assert '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*7"}}\n</tool_call>' in prompt
    assert "<tool_response>\n84\n</tool_response>" in prompt and prompt.endswith("<|im_start|>assistant\n")


def test_tool_choice_none_renders_no_tools_and_parses_no_calls(tools_tokenizer):
    generate = ScriptedGenerate(tools_tokenizer, [CALL_TEXT])
    app = make_app(generate, tools_tokenizer)
    response = run(
        lambda c: c.chat.completions.create(model=MODEL, messages=QUESTION, tools=[CALCULATOR], tool_choice="none"),
        app,
    )
    choice = response.choices[0]
    assert choice.message.tool_calls is None and choice.message.content == CALL_TEXT and choice.finish_reason == "stop"
    assert "<tools>" not in tools_tokenizer.decode(generate.calls[0][1])


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "calculator"}}])
def test_required_and_named_tool_choice_parse_like_auto(tools_tokenizer, tool_choice):
    app = make_app(ScriptedGenerate(tools_tokenizer, [CALL_TEXT]), tools_tokenizer)
    response = run(
        lambda c: c.chat.completions.create(
            model=MODEL, messages=QUESTION, tools=[CALCULATOR], tool_choice=tool_choice
        ),
        app,
    )
    assert response.choices[0].message.tool_calls[0].function.name == "calculator"


def test_a_named_tool_choice_outside_tools_is_a_400(tools_tokenizer):
    app = make_app(ScriptedGenerate(tools_tokenizer, [CALL_TEXT]), tools_tokenizer)
    choice = {"type": "function", "function": {"name": "search"}}
    with pytest.raises(openai.BadRequestError) as caught:
        run(
            lambda c: c.chat.completions.create(model=MODEL, messages=QUESTION, tools=[CALCULATOR], tool_choice=choice),
            app,
        )
    assert caught.value.body["param"] == "tool_choice" and "'search'" in caught.value.body["message"]


def test_a_malformed_call_is_returned_as_text(tools_tokenizer):
    broken = 'Let me compute.<tool_call>\n{"name": "calculator", "arguments": 12*7}\n</tool_call>'
    app = make_app(ScriptedGenerate(tools_tokenizer, [broken]), tools_tokenizer)
    response = run(lambda c: c.chat.completions.create(model=MODEL, messages=QUESTION, tools=[CALCULATOR]), app)
    assert response.choices[0].message.tool_calls is None and response.choices[0].message.content == broken


def test_streamed_tool_calls(tools_tokenizer):
    app = make_app(ScriptedGenerate(tools_tokenizer, [CALL_TEXT]), tools_tokenizer)

    async def call(client):
        stream = await client.chat.completions.create(model=MODEL, messages=QUESTION, tools=[CALCULATOR], stream=True)
        return [chunk async for chunk in stream]

    chunks = run(call, app)
    calls = [d for c in chunks for choice in c.choices for d in (choice.delta.tool_calls or [])]
    assert [(d.index, d.function.name, json.loads(d.function.arguments)) for d in calls] == [
        (0, "calculator", {"expression": "12*7"})
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_another_format_reads_argument_types_from_the_request_tools(tools_tokenizer):
    """``tool_format=qwen3_coder``: the XML call comes back as an OpenAI tool call, its integer argument typed by the
    request's schema (the format writes every value as text)."""
    repeat = {"type": "function", "function": {"name": "repeat", "description": "Repeat a word.", "parameters": {
        "type": "object", "properties": {"word": {"type": "string"}, "times": {"type": "integer"}}}}}  # fmt: skip
    text = "<tool_call>\n<function=repeat>\n<parameter=word>\nhi\n</parameter>\n<parameter=times>\n3\n</parameter>\n"
    text += "</function>\n</tool_call>"
    generate = ScriptedGenerate(tools_tokenizer, [text])
    app = make_app(generate, tools_tokenizer, tool_format="qwen3_coder")
    response = run(lambda c: c.chat.completions.create(model=MODEL, messages=QUESTION, tools=[repeat]), app)
    (call,) = response.choices[0].message.tool_calls
    assert call.function.name == "repeat" and json.loads(call.function.arguments) == {"word": "hi", "times": 3}
