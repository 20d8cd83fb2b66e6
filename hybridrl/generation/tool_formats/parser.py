"""The ``ToolParser`` interface, its registry of formats and what a parse returns.

The contract every format keeps: ``content`` is the text meant for the user; a *call* has a non-empty ``name`` and ``arguments``, a JSON object serialised as a string; a call that cannot be read as one
(bad JSON, no name, a block opened and never closed) is *malformed*: verl logs and drops those, here
:meth:`ToolParser.parse` also counts them (``ParsedToolCalls.num_malformed``) so the agent loop can report parse
failures. The calls returned are verl's, except that a call whose arguments are not a JSON object is dropped (and
counted) where verl passes it on (gpt-oss: the raw text; kimi: ``{}``).
"""

from __future__ import annotations

import asyncio
import json
import logging
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


def _functions(tools: ToolSchemas) -> list[dict[str, Any]]:
    """The function schemas (``{"name", "description", "parameters"}``) of the function tools in ``tools``."""
    functions = []
    for tool in tools or []:
        schema = tool.model_dump(exclude_none=True) if isinstance(tool, OpenAIFunctionToolSchema) else tool
        is_function = "type" not in schema or schema["type"] == "function"  # OpenAI: an untyped tool is a function
        if is_function and (schema.get("function") or {}).get("name"):
            functions.append(schema["function"])
    return functions


def tool_function(tools: ToolSchemas, name: str) -> dict[str, Any] | None:
    """The function schema of tool ``name`` among ``tools``, or None."""
    return next((function for function in _functions(tools) if function["name"] == name), None)


def tool_parameters(tools: ToolSchemas, name: str) -> dict[str, dict[str, Any]] | None:
    """The parameter schemas (by parameter name) of tool ``name`` among ``tools``; None when it is not offered."""
    function = tool_function(tools, name)
    return None if function is None else dict((function.get("parameters") or {}).get("properties") or {})


def tool_names(tools: ToolSchemas) -> list[str]:
    """The function names offered in ``tools``."""
    return [function["name"] for function in _functions(tools)]


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
