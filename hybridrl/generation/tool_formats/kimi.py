"""``kimi``: the special-token tool calls of Kimi K2.

The chat template renders an assistant turn with two calls as (one line, after ``<|im_assistant|>assistant
<|im_middle|>``)::

    Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1
    <|tool_call_argument_begin|>{"zone": "CET"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>

The text between ``<|tool_call_begin|>`` and ``<|tool_call_argument_begin|>`` is the call's id,
``functions.{name}:{index}``: it becomes ``tool_call_id`` and gives the name. An id of another shape is matched
against the offered tools the way verl 0.9 does (a tool whose name it contains, else the one tool whose required
arguments the call gives). ``content`` is the text before ``<|tool_calls_section_begin|>``; a call whose arguments
are not a JSON object (verl: ``{}``) or that never reaches ``<|tool_call_end|>`` is malformed. ``<|im_end|>`` ends
the turn: a stop token.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hybridrl.generation.tool_formats.parser import (
    FunctionCall,
    ParsedToolCalls,
    ToolParser,
    ToolSchemas,
    function_call,
    tool_function,
    tool_names,
)

_CALL = re.compile(r"<\|tool_call_begin\|>(.*?)<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.DOTALL)
_ID = re.compile(r"^functions\.(.+):\d+$")


@ToolParser.register("kimi")
class KimiToolParser(ToolParser):
    """``<|tool_call_begin|>functions.name:i<|tool_call_argument_begin|>{json}<|tool_call_end|>`` calls."""

    tool_calls_section_start_token = "<|tool_calls_section_begin|>"
    tool_call_begin_token = "<|tool_call_begin|>"
    im_end_token = "<|im_end|>"

    @property
    def stop_token_ids(self) -> list[int]:
        return self._token_id(self.im_end_token)

    def parse(self, text: str, tools: ToolSchemas = None) -> ParsedToolCalls:
        start = text.find(self.tool_calls_section_start_token)
        if start < 0:
            return ParsedToolCalls(content=text)
        calls: list[FunctionCall] = []
        found = _CALL.findall(text)
        for raw_id, raw_arguments in found:
            arguments = _json_object(raw_arguments)
            call = function_call(_tool_name(raw_id.strip(), arguments or {}, tools), arguments, raw_arguments)
            if call is not None:
                calls.append(call.model_copy(update={"tool_call_id": raw_id.strip()}))
        num_malformed = text.count(self.tool_call_begin_token) - len(calls)
        return ParsedToolCalls(content=text[:start], calls=calls, num_malformed=num_malformed)


def _json_object(raw: str) -> Any:
    try:
        return json.loads(raw.strip())
    except json.JSONDecodeError:
        return None


def _tool_name(raw_id: str, arguments: dict[str, Any], tools: ToolSchemas) -> str:
    """The function name of a call id (``functions.get_weather:0`` → ``get_weather``; module docstring)."""
    parsed = _ID.match(raw_id)
    offered = tool_names(tools)
    if parsed is not None and (not offered or parsed[1] in offered):
        return parsed[1]
    if not offered or raw_id in offered:
        return raw_id
    compact = raw_id.lower().replace("-", "_")
    contained = [name for name in offered if name.lower() in compact]
    if len(contained) == 1:
        return contained[0]
    satisfied = [name for name in offered if _required(tools, name) and _required(tools, name) <= set(arguments)]
    return satisfied[0] if len(satisfied) == 1 else raw_id


def _required(tools: ToolSchemas, name: str) -> set[str]:
    function = tool_function(tools, name) or {}
    return set((function.get("parameters") or {}).get("required") or [])
