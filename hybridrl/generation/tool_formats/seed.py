"""``seed``: the XML tool calls of ByteDance Seed-OSS.

A call as the chat template renders it::

    Let me check.<seed:tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    <parameter=days>2</parameter>
    </function>
    </seed:tool_call>

A value is JSON when it parses, else text (:func:`argument_values.json_or_text`). ``content`` is the text before the
first ``<seed:tool_call>``; a block without a ``<function=name>...</function>``, or one never closed, is malformed.
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

_BLOCK = re.compile(r"<seed:tool_call>(.*?)</seed:tool_call>", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\n]+)>\s*(.*?)</function>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


@ToolParser.register("seed")
class SeedToolParser(ToolParser):
    """``<seed:tool_call><function=name><parameter=k>v</parameter></function></seed:tool_call>``."""

    tool_call_start_token = "<seed:tool_call>"
    tool_call_end_token = "</seed:tool_call>"

    def parse(self, text: str, tools: ToolSchemas = None) -> ParsedToolCalls:
        start = text.find(self.tool_call_start_token)
        if start < 0:
            return ParsedToolCalls(content=text)
        calls: list[FunctionCall] = []
        for block in _BLOCK.findall(text):
            call = _read_block(block)
            calls += [call] if call is not None else []
        num_blocks = text.count(self.tool_call_start_token)
        return ParsedToolCalls(content=text[:start], calls=calls, num_malformed=num_blocks - len(calls))


def _read_block(block: str) -> FunctionCall | None:
    function = _FUNCTION.search(block)
    if function is None:
        return function_call("", {}, block)  # logged as malformed
    arguments = {key.strip(): json_or_text(value) for key, value in _PARAMETER.findall(function[2])}
    return function_call(function[1], arguments, block)
