"""``stream=true``: a finished completion object re-sent as OpenAI server-sent-event chunks.

Generation finishes before the first chunk is sent (the async servers return whole responses), so each
choice arrives as: a role chunk, one content (or tool-call) chunk, a finish chunk; then a usage chunk
when ``stream_options.include_usage`` is set, and ``data: [DONE]``. Clients that assemble deltas (the
``openai`` package, LangChain, the Agents SDK) see the same message as without streaming.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from fastapi.responses import StreamingResponse


def _chunk(response: dict[str, Any], object_name: str, choices: list[dict], **extra: Any) -> dict[str, Any]:
    header = {key: response[key] for key in ("id", "created", "model")}
    return {**header, "object": object_name, "choices": choices, **extra}


def chat_chunks(response: dict[str, Any], include_usage: bool) -> Iterator[dict[str, Any]]:
    """``chat.completion.chunk`` objects of a ``chat.completion`` object."""
    name = "chat.completion.chunk"
    for choice in response["choices"]:
        index, message = choice["index"], choice["message"]
        yield _chunk(
            response,
            name,
            [{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
        )
        delta: dict[str, Any] = {}
        if message["content"]:
            delta["content"] = message["content"]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        if delta or choice["logprobs"]:
            yield _chunk(
                response,
                name,
                [{"index": index, "delta": delta, "logprobs": choice["logprobs"], "finish_reason": None}],
            )
        yield _chunk(
            response, name, [{"index": index, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}]
        )
    if include_usage:
        yield _chunk(response, name, [], usage=response["usage"])


def completion_chunks(response: dict[str, Any], include_usage: bool) -> Iterator[dict[str, Any]]:
    """``text_completion`` chunks of a ``text_completion`` object: the text, then the finish reason."""
    name = "text_completion"
    for choice in response["choices"]:
        yield _chunk(response, name, [{**choice, "finish_reason": None}])
        yield _chunk(
            response,
            name,
            [{"index": choice["index"], "text": "", "logprobs": None, "finish_reason": choice["finish_reason"]}],
        )
    if include_usage:
        yield _chunk(response, name, [], usage=response["usage"])


def sse_response(chunks: Iterator[dict[str, Any]], headers: dict[str, str]) -> StreamingResponse:
    """The chunks as ``data: {json}`` events ending with ``data: [DONE]``."""

    def events() -> Iterator[str]:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
