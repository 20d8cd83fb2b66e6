"""Tool-call parsers of generated text (verl's ``verl.experimental.agent_loop.tool_parser``, re-exported there).

A parser turns the model's response into ``(content, calls)``; ``actor_rollout_ref.rollout.multi_turn.format`` picks
it by name (:meth:`ToolParser.get_tool_parser`). The formats, at verl 0.9's registry names:

| name          | model families                       | a call as the model writes it                                |
|---------------|--------------------------------------|--------------------------------------------------------------|
| ``hermes``    | Qwen2.5, Qwen3, SmolLM2, NousHermes  | ``<tool_call>{"name": f, "arguments": {...}}</tool_call>``   |
| ``qwen3_coder`` | Qwen3-Coder, Qwen3.5               | ``<tool_call><function=f><parameter=k>v</parameter>...``     |
| ``gpt-oss``   | gpt-oss (harmony)                    | ``<|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>`` |
| ``glm``       | GLM-4.5, 4.6, 4.7                    | ``<tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>`` |
| ``kimi``      | Kimi K2                              | ``<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}...`` |
| ``deepseek_v4`` | DeepSeek-V4 (DSML)                 | ``<｜DSML｜tool_calls><｜DSML｜invoke name="f">...``          |
| ``gemma4``    | Gemma 4                              | ``<|tool_call>call:f{k:<|"|>v<|"|>}<tool_call|>``            |
| ``seed``      | Seed-OSS                             | ``<seed:tool_call><function=f><parameter=k>v</parameter>...`` |
| ``minimax``   | MiniMax-M2                           | ``<minimax:tool_call><invoke name="f"><parameter name="k">v</parameter>...`` |

The contract every format keeps (the hermes one, below, first): ``content`` is the text meant for the user; a *call*
has a non-empty ``name`` and ``arguments``, a JSON object serialised as a string; a call that cannot be read as one
(bad JSON, no name, a block opened and never closed) is *malformed*: verl logs and drops those, here
:meth:`ToolParser.parse` also counts them (``ParsedToolCalls.num_malformed``) so the agent loop can report parse
failures. The calls returned are verl's, except that a call whose arguments are not a JSON object is dropped (and
counted) where verl passes it on (gpt-oss: the raw text; kimi: ``{}``).

Hermes: ``content`` is the text with every complete block removed, as in verl::

    Let me compute.<tool_call>
    {"name": "calculator", "arguments": {"expression": "12*7"}}
    </tool_call>

A block is well formed when its body is a JSON object with a string ``name`` and an object ``arguments`` (a JSON
string that decodes to an object is accepted too, the OpenAI API's form).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from hybridrl.tools.schemas import OpenAIFunctionToolSchema

logger = logging.getLogger(__name__)

ToolSchemas = Sequence[OpenAIFunctionToolSchema | dict[str, Any]] | None


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
    def parse(self, text: str, tools: ToolSchemas = None) -> ParsedToolCalls:
        """The calls in a decoded response ``text`` (special tokens kept). ``tools``: the schemas offered to the
        model (``OpenAIFunctionToolSchema`` or their dicts), for the formats that read them (argument types,
        tool names)."""

    async def extract_tool_calls(
        self, responses_ids: list[int], tools: ToolSchemas = None
    ) -> tuple[str, list[FunctionCall]]:
        """verl's entry point: decode ``responses_ids`` (off the event loop, special tokens kept: most formats
        are written in them) and return ``(content, calls)``."""
        text = await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.tokenizer.decode(responses_ids, skip_special_tokens=False)
        )
        parsed = self.parse(text, tools)
        return parsed.content, parsed.calls

    def _token_id(self, token: str) -> list[int]:
        """``[id]`` of a special ``token`` in the tokenizer's vocabulary, ``[]`` when it has none."""
        if self.tokenizer is None:
            return []
        token_id = self.tokenizer.convert_tokens_to_ids(token)
        unknown = getattr(self.tokenizer, "unk_token_id", None)
        if not isinstance(token_id, int) or token_id < 0 or (token_id == unknown and token != self.tokenizer.unk_token):
            return []
        return [token_id]

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


def tool_function(tools: ToolSchemas, name: str) -> dict[str, Any] | None:
    """The function schema (``{"name", "description", "parameters"}``) of tool ``name`` among ``tools``, or None."""
    for tool in tools or []:
        schema = tool.model_dump(exclude_none=True) if isinstance(tool, OpenAIFunctionToolSchema) else tool
        function = schema.get("function") or {}
        if schema.get("type", "function") == "function" and function.get("name") == name:
            return function
    return None


def tool_parameters(tools: ToolSchemas, name: str) -> dict[str, dict[str, Any]] | None:
    """The parameter schemas (by parameter name) of tool ``name`` among ``tools``; None when it is not offered."""
    function = tool_function(tools, name)
    return None if function is None else dict((function.get("parameters") or {}).get("properties") or {})


def tool_names(tools: ToolSchemas) -> list[str]:
    """The function names offered in ``tools``."""
    names = []
    for tool in tools or []:
        schema = tool.model_dump(exclude_none=True) if isinstance(tool, OpenAIFunctionToolSchema) else tool
        if schema.get("type", "function") == "function" and (schema.get("function") or {}).get("name"):
            names.append(schema["function"]["name"])
    return names


def function_call(name: str, arguments: Any, raw: str) -> FunctionCall | None:
    """A call of ``name`` with ``arguments`` (a dict), or None (logged) when either is unusable; ``raw``: the text
    the call was read from, quoted in the log."""
    if not isinstance(name, str) or not name.strip():
        logger.info("malformed tool call (no function name): %r", raw[:200])
        return None
    if not isinstance(arguments, dict):
        logger.info("malformed tool call (arguments are not a JSON object): %r", raw[:200])
        return None
    return FunctionCall(name=name.strip(), arguments=json.dumps(arguments, ensure_ascii=False))


# The other formats register themselves on import (a package beside this module; it imports the names above).
from hybridrl.generation import tool_formats as _tool_formats  # noqa: E402, F401
