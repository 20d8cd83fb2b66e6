"""Tool-call parsers of generated text (verl's ``verl.experimental.agent_loop.tool_parser``, re-exported there).

A parser turns the model's response tokens into ``(content, calls)``; ``multi_turn.format`` picks it by
name (:meth:`ToolParser.get_tool_parser`). Formats: ``hermes`` (Qwen2.5/Qwen3, SmolLM2, NousHermes)::

    Let me compute.<tool_call>
    {"name": "calculator", "arguments": {"expression": "12*7"}}
    </tool_call>

A block is *well formed* when its body is a JSON object with a string ``name`` and an object
``arguments`` (a JSON string that decodes to an object is accepted too, the OpenAI API's form). Any other
block, and an opening ``<tool_call>`` never closed, is *malformed*: verl only logs those; here
:meth:`HermesToolParser.parse` also counts them (``ParsedToolCalls.num_malformed``) so the agent loop can
report parse failures. ``content`` is the text with every complete block removed, as in verl.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from hybridrl.tools.schemas import OpenAIFunctionToolSchema

logger = logging.getLogger(__name__)


class FunctionCall(BaseModel):
    """One parsed call: ``name`` and ``arguments``, the arguments as a JSON string (as the model wrote them
    re-serialised; validate them before calling). ``tool_call_id`` when the format carries one."""

    arguments: str
    name: str
    tool_call_id: str | None = None


@dataclass(frozen=True)
class ParsedToolCalls:
    """``content``: response text without the tool-call blocks; ``calls``: well-formed calls in order;
    ``num_malformed``: blocks that could not be read as a call."""

    content: str
    calls: list[FunctionCall] = field(default_factory=list)
    num_malformed: int = 0


class ToolParser(ABC):
    """Base of tool-call parsers; subclasses register a format name with :meth:`register`."""

    _registry: dict[str, type[ToolParser]] = {}

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @property
    def stop_token_ids(self) -> list[int]:
        """Extra token ids that must stop generation for this format (none: the model's EOS ends its turn)."""
        return []

    @abstractmethod
    def parse(self, text: str) -> ParsedToolCalls:
        """The calls in a decoded response ``text``."""

    async def extract_tool_calls(
        self, responses_ids: list[int], tools: list[OpenAIFunctionToolSchema] | None = None
    ) -> tuple[str, list[FunctionCall]]:
        """verl's entry point: decode ``responses_ids`` (off the event loop) and return ``(content, calls)``."""
        text = await asyncio.get_running_loop().run_in_executor(None, self.tokenizer.decode, responses_ids)
        parsed = self.parse(text)
        return parsed.content, parsed.calls

    @classmethod
    def get_tool_parser(cls, name: str, tokenizer: Any) -> ToolParser:
        """The parser of format ``name``; ValueError listing the known formats when unknown."""
        if name not in cls._registry:
            raise ValueError(
                f"unknown tool-call format '{name}' (actor_rollout_ref.rollout.multi_turn.format); "
                f"known formats: {sorted(cls._registry)}"
            )
        return cls._registry[name](tokenizer)

    @classmethod
    def register(cls, name: str):
        """Class decorator: ``@ToolParser.register("my_format")``."""

        def decorator(subclass: type[ToolParser]) -> type[ToolParser]:
            cls._registry[name] = subclass
            return subclass

        return decorator


@ToolParser.register("hermes")
class HermesToolParser(ToolParser):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (see the module docstring)."""

    tool_call_start_token = "<tool_call>"
    tool_call_end_token = "</tool_call>"
    tool_call_regex = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def parse(self, text: str) -> ParsedToolCalls:
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
