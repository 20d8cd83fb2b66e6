"""``hermes``: the JSON tool calls of Qwen2.5, Qwen3, SmolLM2 and NousHermes.

``content`` is the text with every complete block removed, as in verl::

    Let me compute.<tool_call>
    {"name": "calculator", "arguments": {"expression": "12*7"}}
    </tool_call>

A block is well formed when its body is a JSON object with a string ``name`` and an object ``arguments`` (a JSON
string that decodes to an object is accepted too, the OpenAI API's form).
"""

from __future__ import annotations

import json
import logging
import re

from hybridrl.generation.tool_formats.parser import FunctionCall, ParsedToolCalls, ToolParser, ToolSchemas

logger = logging.getLogger(__name__)


@ToolParser.register("hermes")
class HermesToolParser(ToolParser):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (see the module docstring)."""

    tool_call_start_token = "<tool_call>"
    tool_call_end_token = "</tool_call>"
    tool_call_regex = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def parse(self, text: str, tools: ToolSchemas = None) -> ParsedToolCalls:
        if self.tool_call_start_token not in text:
            return ParsedToolCalls(content=text)
        calls: list[FunctionCall] = []
        num_malformed = 0
        for body in self.tool_call_regex.findall(text):
            call = _decode_call(body)
            if call is None:
                num_malformed += 1
            else:
                calls.append(call)
        content = self.tool_call_regex.sub("", text)
        if self.tool_call_start_token in content:  # opened and never closed (e.g. cut by the length limit)
            num_malformed += 1
        return ParsedToolCalls(content=content, calls=calls, num_malformed=num_malformed)


def _decode_call(body: str) -> FunctionCall | None:
    """The call in one block body, or None (logged) when it is not ``{"name": str, "arguments": object}``."""
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as exc:
        logger.info("malformed tool call (bad JSON: %s): %r", exc, body[:200])
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str) or not payload["name"]:
        logger.info("malformed tool call (no string `name`): %r", body[:200])
        return None
    arguments = payload.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = None
    if not isinstance(arguments, dict):
        logger.info("malformed tool call (`arguments` is not an object): %r", body[:200])
        return None
    return FunctionCall(name=payload["name"], arguments=json.dumps(arguments, ensure_ascii=False))
