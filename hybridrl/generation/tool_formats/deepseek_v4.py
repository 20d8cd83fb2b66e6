"""``deepseek_v4``: the DSML tool calls of DeepSeek-V4.

DSML tags carry the fullwidth bar ``｜`` (U+FF5C). One block holds every call of the turn (as DeepSeek-V4's
encoder writes it; ``string="true"`` marks a value kept as text, ``string="false"`` a JSON value)::

    <think>Need the weather.</think>Let me check.

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls><｜end▁of▁sentence｜>

``content`` is the text before the block, less the reasoning up to the last ``</think>`` and the blank line the
encoder puts before the block; the pad and end-of-sentence tokens are removed first (as in verl). A
``string="false"`` value that is not JSON is kept as text (verl too); a block with no complete invoke, or one never
closed, is malformed.
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
)

DSML = "｜DSML｜"
_D = re.escape(DSML)
_BLOCK = re.compile(rf"<{_D}tool_calls>(.*?)</{_D}tool_calls>", re.DOTALL)
_INVOKE = re.compile(rf'<{_D}invoke name="(.*?)">(.*?)</{_D}invoke>', re.DOTALL)
_PARAMETER = re.compile(rf'<{_D}parameter name="(.*?)" string="(true|false)">(.*?)</{_D}parameter>', re.DOTALL)


@ToolParser.register("deepseek_v4")
class DeepSeekV4ToolParser(ToolParser):
    """``<｜DSML｜tool_calls><｜DSML｜invoke name="f"><｜DSML｜parameter ...>`` blocks (module docstring)."""

    tool_calls_start_token = f"<{DSML}tool_calls>"
    eos_token = "<｜end▁of▁sentence｜>"
    think_end_token = "</think>"

    def parse(self, text: str, tools: ToolSchemas = None) -> ParsedToolCalls:
        for token in (getattr(self.tokenizer, "pad_token", None), self.eos_token):
            text = text.replace(token, "") if token else text
        start = text.find(self.tool_calls_start_token)
        if start < 0:
            return ParsedToolCalls(content=self._answer(text))
        calls: list[FunctionCall] = []
        num_malformed = text.count(self.tool_calls_start_token) - len(_BLOCK.findall(text))  # never closed
        for block in _BLOCK.findall(text):
            invokes = _INVOKE.findall(block)
            num_malformed += not invokes
            for name, body in invokes:
                call = function_call(name, _arguments(body), body)
                num_malformed += call is None
                calls += [call] if call is not None else []
        content = self._answer(text[:start]).removesuffix("\n\n")
        return ParsedToolCalls(content=content, calls=calls, num_malformed=num_malformed)

    def _answer(self, text: str) -> str:
        """What follows the reasoning: after the last ``</think>`` (all of it in chat mode, which has none)."""
        return text.rpartition(self.think_end_token)[2]


def _arguments(body: str) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for name, is_text, value in _PARAMETER.findall(body):
        if is_text == "true":
            arguments[name] = value
            continue
        try:
            arguments[name] = json.loads(value)
        except json.JSONDecodeError:
            arguments[name] = value  # marked JSON but not JSON: kept as the model wrote it (verl does the same)
    return arguments
