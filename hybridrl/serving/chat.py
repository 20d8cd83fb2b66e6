"""``POST /v1/chat/completions``: messages → prompt ids (``ChatTokens``) → n choices → a chat completion.

The prompt ids are ``ChatTokens(tokenizer, tools, chat_template_kwargs).prompt_ids(messages)``: exactly what
hybridrl's agent loop sends for the same conversation. Assistant messages of the history are rendered by
the chat template from their text (and structured ``tool_calls``), not from the ids generated earlier.

``tool_choice``: ``auto`` (the default with tools) renders the tools into the prompt and parses tool calls
(``tool_format``, e.g. hermes) from the response; ``none`` renders no tools and parses none;
``required`` and a named function behave as ``auto`` (no constrained decoding: the model may still answer
in text, and a named function must be one of ``tools``).
"""

from __future__ import annotations

import json
from typing import Any

from hybridrl.serving.choices import Choice, chat_logprobs, finish_choice, generate_choices
from hybridrl.serving.context import ServingContext, response_header, usage
from hybridrl.serving.errors import invalid_request
from hybridrl.serving.requests import ChatCompletionRequest, ChatMessage


def _text_content(message: ChatMessage, index: int) -> str:
    """A message's content as text: a string, or the concatenated text of its ``text`` parts."""
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    texts = []
    for part in message.content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise invalid_request(
                f"only text content parts are supported, got {part.get('type')!r}", f"messages.{index}.content"
            )
        texts.append(part["text"])
    return "".join(texts)


def _template_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """A history tool call with its JSON ``arguments`` string decoded (chat templates expect an object)."""
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            function["arguments"] = json.loads(arguments)
        except json.JSONDecodeError:
            pass  # rendered as the string the client sent
    return {**call, "function": function}


def template_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Request messages → chat-template messages (``developer`` → ``system``, text content, decoded call
    arguments; extra keys kept)."""
    rendered = []
    for index, message in enumerate(messages):
        entry = message.model_dump(exclude_none=True)
        entry["role"] = "system" if message.role == "developer" else message.role
        entry["content"] = _text_content(message, index)
        if message.tool_calls:
            entry["tool_calls"] = [_template_tool_call(call) for call in message.tool_calls]
        rendered.append(entry)
    return rendered


def _tool_mode(body: ChatCompletionRequest) -> bool:
    """True when tools are rendered and parsed (see the module docstring); 400 for a bad ``tool_choice``."""
    choice = body.tool_choice
    if not body.tools or choice == "none":
        return False
    if choice is None or choice in ("auto", "required"):
        return True
    names = {tool.function.name for tool in body.tools}
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if name is None:
        raise invalid_request(
            f"'tool_choice' must be none, auto, required or a named function, got {choice!r}", "tool_choice"
        )
    if name not in names:
        raise invalid_request(f"'tool_choice' names the function {name!r}, which is not in 'tools'", "tool_choice")
    return True


def _choice_object(context: ServingContext, choice: Choice, logprobs: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": choice.content}
    if choice.tool_calls:
        message["tool_calls"] = choice.tool_calls
    return {
        "index": choice.index,
        "message": message,
        "logprobs": chat_logprobs(context.tokenizer, choice) if logprobs else None,
        "finish_reason": choice.finish_reason,
    }


async def chat_completion(context: ServingContext, body: ChatCompletionRequest, trajectory_id: str) -> dict[str, Any]:
    """The chat completion object for ``body`` (every returned choice recorded under ``trajectory_id``)."""
    field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    requested = context.check_request(body, body.requested_max_tokens(), field)
    stop, use_tools = body.stop_strings(), _tool_mode(body)
    tools = [tool.model_dump(exclude_none=True) for tool in body.tools] if body.tools else None
    template_kwargs = {**context.chat_template_kwargs, **(body.chat_template_kwargs or {})}
    messages = template_messages(body.messages)
    prompt_ids = context.renderer.prompt_ids(messages, tools if use_tools else None, template_kwargs, trajectory_id)
    max_tokens = context.fit_prompt(prompt_ids, "messages", requested, field, context.limits.max_tokens)
    params = context.sampling_params(body, max_tokens, body.logprobs)
    outputs = await generate_choices(context.generate, trajectory_id, prompt_ids, params, body.n)
    parser = context.tool_parser if use_tools else None
    choices = [finish_choice(i, output, context.tokenizer, stop, parser, tools) for i, output in enumerate(outputs)]
    request_messages = [message.model_dump(exclude_none=True) for message in body.messages]
    for choice in choices:
        context.record(trajectory_id, prompt_ids, choice, request_messages=request_messages, tools=tools)
    return {
        **response_header("chatcmpl", context.model_name, "chat.completion"),
        "choices": [_choice_object(context, choice, body.logprobs) for choice in choices],
        "usage": usage(len(prompt_ids), choices),
    }
