"""``glm``: the XML tool calls of GLM-4.5, 4.6 and 4.7.

GLM-4.5/4.6's chat template renders a call as (after the generation prompt ``<|assistant|>``)::

    <think>Need the weather.</think>
    Let me check.
    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    <arg_key>days</arg_key>
    <arg_value>2</arg_value>
    </tool_call>

GLM-4.7 writes the same without the newlines (``<tool_call>get_weather<arg_key>city</arg_key><arg_value>...``).
The name is the text before the first ``<arg_key>``; a value is JSON when it parses, else text
(:func:`argument_values.json_or_text`; the template writes strings bare and other values as JSON). ``content`` is the
text before the first ``<tool_call>`` without a leading ``<think>...</think>`` block; a block without a name, or a
``<tool_call>`` never closed, is malformed. The model ends a calling turn with ``<|observation|>``: a stop token.
"""

from __future__ import annotations

import re

from hybridrl.generation.tool_formats.argument_values import json_or_text
from hybridrl.generation.tool_formats.parser import (
    FunctionCall,
    ParsedToolCalls,
    ToolParser,
    ToolSchemas,
    function_call,
)

_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ARGUMENT = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
_LEADING_THINK = re.compile(r"^\s*(?:<think>.*?</think>|</think>)", re.DOTALL)


@ToolParser.register("glm")
class GLMToolParser(ToolParser):
    """``<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>`` (module docstring)."""

    tool_call_start_token = "<tool_call>"
    tool_call_end_token = "</tool_call>"
    observation_token = "<|observation|>"

    @property
    def stop_token_ids(self) -> list[int]:
        return self._token_id(self.observation_token)

    def parse(self, text: str, tools: ToolSchemas = None) -> ParsedToolCalls:
        start = text.find(self.tool_call_start_token)
        if start < 0:
            return ParsedToolCalls(content=text)
        calls: list[FunctionCall] = []
        for block in _BLOCK.findall(text):
            call = _read_block(block)
            calls += [call] if call is not None else []
        num_blocks = text.count(self.tool_call_start_token)
        content = _LEADING_THINK.sub("", text[:start], count=1)
        return ParsedToolCalls(content=content, calls=calls, num_malformed=num_blocks - len(calls))


def _read_block(block: str) -> FunctionCall | None:
    first_key = block.find("<arg_key>")
    name = block if first_key < 0 else block[:first_key]
    arguments = {key.strip(): json_or_text(value) for key, value in _ARGUMENT.findall(block[max(first_key, 0) :])}
    return function_call(name.strip(), arguments, block)
