"""``minimax``: the XML tool calls of MiniMax-M2.

One block holds every call of the turn::

    Let me check.
    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    <parameter name="days">2</parameter>
    </invoke>
    <invoke name="get_time">
    <parameter name="zone">CET</parameter>
    </invoke>
    </minimax:tool_call>

A value is JSON when it parses, else text (:func:`argument_values.json_or_text`). ``content`` is the text before the
first ``<minimax:tool_call>``; a block with no ``<invoke name="...">...</invoke>``, or one never closed, is malformed.
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

_BLOCK = re.compile(r"<minimax:tool_call>(.*?)</minimax:tool_call>", re.DOTALL)
_INVOKE = re.compile(r'<invoke name="([^"]+)">\s*(.*?)</invoke>', re.DOTALL)
_PARAMETER = re.compile(r'<parameter name="([^"]+)">(.*?)</parameter>', re.DOTALL)


@ToolParser.register("minimax")
class MiniMaxToolParser(ToolParser):
    """``<minimax:tool_call><invoke name="f"><parameter name="k">v</parameter></invoke>...</minimax:tool_call>``."""

    tool_call_start_token = "<minimax:tool_call>"
    tool_call_end_token = "</minimax:tool_call>"

    def parse(self, text: str, tools: ToolSchemas = None) -> ParsedToolCalls:
        start = text.find(self.tool_call_start_token)
        if start < 0:
            return ParsedToolCalls(content=text)
        calls: list[FunctionCall] = []
        num_malformed = text.count(self.tool_call_start_token) - len(_BLOCK.findall(text))  # never closed
        for block in _BLOCK.findall(text):
            invokes = _INVOKE.findall(block)
            num_malformed += not invokes
            for name, body in invokes:
                arguments = {key.strip(): json_or_text(value) for key, value in _PARAMETER.findall(body)}
                call = function_call(name, arguments, body)
                num_malformed += call is None
                calls += [call] if call is not None else []
        return ParsedToolCalls(content=text[:start], calls=calls, num_malformed=num_malformed)
