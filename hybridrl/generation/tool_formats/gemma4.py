"""``gemma4``: the tool calls of Gemma 4.

Gemma 4's chat template writes a call as ``<|tool_call>call:{name}{{arguments}}<tool_call|>``, the arguments in its
own notation: ``key:value`` pairs joined by commas (keys sorted, unquoted), strings between ``<|"|>`` marks, numbers,
``true``/``false`` bare, objects ``{k:v,...}`` and lists ``[v,...]`` nested. Two calls after some text::

    Let me check.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|><|tool_call>call:get_time{}<tool_call|>

``content`` is the text before the first ``<|tool_call>`` (the pad token removed first, as in verl); a call whose
arguments do not follow the notation, or a ``<|tool_call>`` never closed, is malformed. The model does not end its
turn after a call: ``<tool_call|>`` is a stop token, so the agent loop runs the tool before it writes on. verl reads
flat arguments only; nested objects and lists are read here as well.
"""

from __future__ import annotations

import re
from typing import Any

from hybridrl.generation.tool_formats.parser import (
    FunctionCall,
    ParsedToolCalls,
    ToolParser,
    ToolSchemas,
    function_call,
)

_BLOCK = re.compile(r"<\|tool_call>(.*?)<tool_call\|>", re.DOTALL)
_HEADER = re.compile(r"\s*call:([\w.\-]+)(?=\{)")
QUOTE = '<|"|>'


@ToolParser.register("gemma4")
class Gemma4ToolParser(ToolParser):
    """``<|tool_call>call:name{key:value,...}<tool_call|>`` calls (module docstring)."""

    tool_call_start_token = "<|tool_call>"
    tool_call_end_token = "<tool_call|>"

    @property
    def stop_token_ids(self) -> list[int]:
        return self._token_id(self.tool_call_end_token)

    def parse(self, text: str, tools: ToolSchemas = None) -> ParsedToolCalls:
        pad = getattr(self.tokenizer, "pad_token", None)
        text = text.replace(pad, "") if pad else text
        start = text.find(self.tool_call_start_token)
        if start < 0:
            return ParsedToolCalls(content=text)
        calls: list[FunctionCall] = []
        for block in _BLOCK.findall(text):
            call = _read_call(block)
            calls += [call] if call is not None else []
        num_malformed = text.count(self.tool_call_start_token) - len(calls)
        return ParsedToolCalls(content=text[:start], calls=calls, num_malformed=num_malformed)


def _read_call(block: str) -> FunctionCall | None:
    header = _HEADER.match(block)
    if header is None:
        return function_call("", {}, block)  # logged as malformed
    reader = _Reader(block, header.end())
    try:
        arguments = reader.object()
        reader.end()
    except ValueError as exc:
        return function_call(header[1], f"unreadable: {exc}", block)  # logged as malformed
    return function_call(header[1], arguments, block)


class _Reader:
    """Recursive-descent reader of the argument notation over ``text`` from ``position``."""

    def __init__(self, text: str, position: int) -> None:
        self.text, self.i = text, position

    def object(self) -> dict[str, Any]:
        self._expect("{")
        members: dict[str, Any] = {}
        while not self._take("}"):
            if members:
                self._expect(",")
            key = self._quoted() if self._at(QUOTE) else self._bare_until(":")
            self._expect(":")
            members[key] = self.value()
        return members

    def value(self) -> Any:
        if self._at(QUOTE):
            return self._quoted()
        if self._at("{"):
            return self.object()
        if self._take("["):
            items: list[Any] = []
            while not self._take("]"):
                if items:
                    self._expect(",")
                items.append(self.value())
            return items
        return _bare_value(self._bare_until(",}]"))

    def end(self) -> None:
        if self.text[self.i :].strip():
            raise ValueError(f"text after the arguments: {self.text[self.i :][:40]!r}")

    # ---- primitives
    def _at(self, token: str) -> bool:
        while self.i < len(self.text) and self.text[self.i].isspace():
            self.i += 1
        return self.text.startswith(token, self.i)

    def _take(self, token: str) -> bool:
        if self._at(token):
            self.i += len(token)
            return True
        if self.i >= len(self.text):
            raise ValueError("the arguments end early")
        return False

    def _expect(self, token: str) -> None:
        if not self._take(token):
            raise ValueError(f"expected {token!r} at {self.text[self.i :][:40]!r}")

    def _quoted(self) -> str:
        start = self.i + len(QUOTE)
        end = self.text.find(QUOTE, start)
        if end < 0:
            raise ValueError("a string is never closed")
        self.i = end + len(QUOTE)
        return self.text[start:end]

    def _bare_until(self, stops: str) -> str:
        start = self.i
        while self.i < len(self.text) and self.text[self.i] not in stops:
            self.i += 1
        word = self.text[start : self.i].strip()
        if not word or "<" in word:
            raise ValueError(f"expected a value at {self.text[start:][:40]!r}")
        return word


def _bare_value(word: str) -> Any:
    """A value written without quotes: a boolean, null, a number, else the word as text."""
    literals = {"true": True, "false": False, "null": None, "none": None}
    if word.lower() in literals:
        return literals[word.lower()]
    for convert in (int, float):
        try:
            return convert(word)
        except ValueError:
            pass
    return word
