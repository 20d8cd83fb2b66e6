"""``qwen3_coder``: the XML tool calls of Qwen3-Coder and Qwen3.5.

What the chat template renders for an assistant turn with two calls (after the generation prompt
``<|im_start|>assistant\\n``)::

    I'll look both up.

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    2
    </parameter>
    </function>
    </tool_call>
    <tool_call>
    ...
    </tool_call><|im_end|>

A parameter's value is the text between its tags less one leading and one trailing newline, converted by the
parameter's type in the tool schemas passed to ``parse`` (:func:`argument_values.typed_value`: without them every
value stays text, as in verl). ``content`` is the text before the first ``<tool_call>``. As in verl, a call cut short
(no ``</parameter>``, ``</function>`` or ``</tool_call>`` before the end of the text) is still read, as far as it
goes; a block without a complete ``<function=name>`` header is malformed.
"""

from __future__ import annotations

import re

from hybridrl.generation.tool_formats.argument_values import typed_value
from hybridrl.generation.tool_formats.parser import (
    FunctionCall,
    ParsedToolCalls,
    ToolParser,
    ToolSchemas,
    function_call,
    tool_parameters,
)

_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*?)$", re.DOTALL)
_FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=(.*?)</parameter>|<parameter=(.*?)$", re.DOTALL)


@ToolParser.register("qwen3_coder")
class Qwen3XMLToolParser(ToolParser):
    """``<tool_call><function=name><parameter=key>value</parameter>...</function></tool_call>`` (module docstring)."""

    tool_call_start_token = "<tool_call>"
    tool_call_end_token = "</tool_call>"

    def parse(self, text: str, tools: ToolSchemas = None) -> ParsedToolCalls:
        start = text.find(self.tool_call_start_token)
        if start < 0:
            return ParsedToolCalls(content=text)
        calls: list[FunctionCall] = []
        num_malformed = 0
        for closed, cut in _BLOCK.findall(text):
            functions = [a or b for a, b in _FUNCTION.findall(closed or cut)]
            num_malformed += not functions
            for function in functions:
                call = _read_function(function, tools)
                num_malformed += call is None
                calls += [call] if call is not None else []
        return ParsedToolCalls(content=text[:start], calls=calls, num_malformed=num_malformed)

    def _parse_xml_function_call(self, function_call_str: str, tools: ToolSchemas) -> FunctionCall | None:
        """verl 0.9's name for reading one ``<function=``...``</function>`` body (its tests call it)."""
        return _read_function(function_call_str, tools)


def _read_function(function: str, tools: ToolSchemas) -> FunctionCall | None:
    """The call in ``name>`` + parameters (the text after ``<function=``); None when the header is incomplete."""
    name, closed, body = function.partition(">")
    if not closed:
        return function_call("", {}, function)  # logged as malformed
    schemas = tool_parameters(tools, name) or {}
    arguments = {}
    for closed_param, cut_param in _PARAMETER.findall(body):
        key, has_value, value = (closed_param or cut_param).partition(">")
        if not has_value:
            continue  # a parameter header cut short: dropped, the call kept (as verl)
        value = value[1:] if value.startswith("\n") else value
        value = value[:-1] if value.endswith("\n") else value
        arguments[key] = typed_value(value, schemas.get(key) if key in schemas else None)
    return function_call(name, arguments, function)
