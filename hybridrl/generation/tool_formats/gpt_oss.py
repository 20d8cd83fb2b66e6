"""``gpt-oss``: tool calls in OpenAI's harmony format (gpt-oss-20b / 120b).

A harmony response is a sequence of messages, each ``<|start|>{role}{header}<|message|>{body}{end}``; the generation
prompt already holds the first ``<|start|>assistant``. The header names the channel (``<|channel|>analysis``,
``commentary``, ``final``) and, for a tool call, the recipient ``to=functions.{name}`` and the argument format
(``<|constrain|>json``); a call ends with ``<|call|>`` (other messages with ``<|end|>``, the final answer with
``<|return|>``). A turn that reasons, then calls a tool, as the model writes it::

    <|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary
    to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>

(one line). The recipient may also stand right after the role (``<|start|>assistant to=functions.get_weather
<|channel|>commentary json<|message|>...``, the form the Hugging Face chat template renders for past calls); both are
read. ``content`` is the text less the reasoning (``analysis``) messages and the call messages, as in verl; a message
to ``functions.*`` whose body is not a JSON object, or that is cut before ``<|call|>``, is malformed. The pad token
is removed first (verl does too).
"""

from __future__ import annotations

import json
import re

from hybridrl.generation.tool_formats.parser import (
    FunctionCall,
    ParsedToolCalls,
    ToolParser,
    ToolSchemas,
    function_call,
)

# One message: optional "<|start|>role", a header of plain text and channel/constrain tokens, the body, its end.
_MESSAGE = re.compile(
    r"(?:<\|start\|>)?(?P<header>(?:[^<]|<\|channel\|>|<\|constrain\|>)*)<\|message\|>(?P<body>.*?)"
    r"(?P<end><\|end\|>|<\|call\|>|<\|return\|>|(?=<\|start\|>)|$)",
    re.DOTALL,
)
_RECIPIENT = re.compile(r"\bto=(\S+?)(?=\s|<|$)")
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")


@ToolParser.register("gpt-oss")
class GptOssToolParser(ToolParser):
    """Harmony messages addressed to ``functions.{name}`` (module docstring)."""

    def parse(self, text: str, tools: ToolSchemas = None) -> ParsedToolCalls:
        pad = getattr(self.tokenizer, "pad_token", None)
        text = text.replace(pad, "") if pad else text
        calls: list[FunctionCall] = []
        num_malformed = 0
        kept: list[str] = []
        position = 0
        for message in _MESSAGE.finditer(text):
            recipient = _RECIPIENT.search(message["header"])
            channel = _CHANNEL.search(message["header"])
            is_call = recipient is not None and recipient[1].startswith("functions.")
            if is_call:
                call = _read_call(recipient[1], message)
                num_malformed += call is None
                calls += [call] if call is not None else []
            if is_call or (channel is not None and channel[1] == "analysis"):
                kept.append(text[position : message.start()])
                position = message.end()
        kept.append(text[position:])
        return ParsedToolCalls(content="".join(kept), calls=calls, num_malformed=num_malformed)


def _read_call(recipient: str, message: re.Match[str]) -> FunctionCall | None:
    """The call of a message addressed to ``functions.{name}``; None when cut short or its body is not JSON."""
    if message["end"] != "<|call|>":
        return function_call("", {}, message[0])  # logged as malformed: the call never ended
    try:
        arguments = json.loads(message["body"])
    except json.JSONDecodeError:
        arguments = None
    return function_call(recipient[len("functions.") :], arguments, message[0])
