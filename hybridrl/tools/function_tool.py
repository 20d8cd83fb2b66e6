"""Plain Python functions as tools: ``multi_turn.function_tool_path`` (verl 0.9, ``verl.tools.function_tool``).

``function_tool_path`` names a ``.py`` file. Its functions decorated with :func:`function_tool` become tools
(verl 0.9's contract); a file with no decorated function may instead list its tool functions in ``__all__``
(a hybridrl addition). Example file::

    from hybridrl.tools.function_tool import function_tool

    @function_tool
    def add(a: int, b: int) -> int:
        \"\"\"Add two integers.

        Args:
            a: the first addend
            b: the second addend
        \"\"\"
        return a + b

The schema comes from the signature and the Google-style docstring (``transformers.utils.get_json_schema``,
as in verl): the text before ``Args:`` is the description, each ``Args:`` line a parameter's description,
type hints map to JSON types (``int`` → ``integer``, ``float`` → ``number``, ``list[x]`` → ``array``,
``Literal[...]`` → ``enum``, ``Optional`` → not required). Every parameter needs a hint and an ``Args:`` line.

Functions may be sync (run in a thread) or async. Return values become the tool response
(:func:`normalize_function_tool_return`): ``str`` as is, ``dict`` as JSON, a number or anything else as
``str(value)``, a :class:`ToolResponse` as is, or a ``(response, reward[, metrics])`` tuple.

Deviation from verl 0.9: :class:`FunctionTool` is a :class:`BaseTool` (create/release are no-ops), so the
agent loop and :class:`~hybridrl.tools.executor.ToolExecutor` treat both kinds alike; verl's ``call`` is kept.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from hybridrl.tools.base_tool import BaseTool
from hybridrl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from hybridrl.utils.import_utils import load_module_from_path

logger = logging.getLogger(__name__)

_FUNCTION_TOOL_PATH_KEY = "actor_rollout_ref.rollout.multi_turn.function_tool_path"


class FunctionTool(BaseTool):
    """A stateless tool wrapping ``fn``; ``execute`` calls it with the model's arguments.

    Args:
        name: the tool name the model uses.
        fn: the function (sync or async).
        tool_schema: its OpenAI schema.
        is_async: whether ``fn`` is a coroutine function (inferred when None).
    """

    def __init__(
        self, name: str, fn: Callable[..., Any], tool_schema: OpenAIFunctionToolSchema, is_async: bool | None = None
    ):
        super().__init__({}, tool_schema)
        self.name = name
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn) if is_async is None else is_async

    async def call(self, parameters: dict[str, Any]) -> Any:
        """``fn(**parameters)``: awaited when async, else in a thread so the caller's loop keeps running."""
        if self.is_async:
            return await self.fn(**parameters)
        return await asyncio.to_thread(self.fn, **parameters)

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        return normalize_function_tool_return(await self.call(parameters))


# name -> tool, filled by @function_tool at import time of the decorated functions' module.
FUNCTION_TOOL_REGISTRY: dict[str, FunctionTool] = {}
_LOADED_PATHS: dict[str, list[FunctionTool]] = {}


def function_tool(name: str | Callable | None = None, *, schema: OpenAIFunctionToolSchema | dict | None = None):
    """Register a function as a tool: ``@function_tool``, ``@function_tool("tool_name")`` or
    ``@function_tool(schema={...})`` (a hand-written schema instead of the inferred one).

    Returns the function unchanged. Raises ValueError when another function already holds the name.
    """

    def decorate(fn: Callable, tool_name: str | None) -> Callable:
        register_function(fn, tool_name, schema)
        return fn

    if callable(name):
        return decorate(name, None)
    return lambda fn: decorate(fn, name)


def register_function(
    fn: Callable, name: str | None = None, schema: OpenAIFunctionToolSchema | dict | None = None
) -> FunctionTool:
    """Build the :class:`FunctionTool` of ``fn`` and put it in :data:`FUNCTION_TOOL_REGISTRY`.

    The tool's name is ``name``, else the given schema's function name, else ``fn.__name__``.
    """
    if isinstance(schema, dict):
        schema = OpenAIFunctionToolSchema.model_validate(schema)
    tool_name = name or (schema.function.name if schema is not None else fn.__name__)
    if schema is not None and schema.function.name != tool_name:
        schema = schema.model_copy(update={"function": schema.function.model_copy(update={"name": tool_name})})
    tool = FunctionTool(tool_name, fn, schema or schema_from_function(fn, tool_name))
    existing = FUNCTION_TOOL_REGISTRY.get(tool_name)
    if existing is not None and not _same_definition(existing.fn, fn):
        raise ValueError(
            f"function tool '{tool_name}' is already registered to {_qualified(existing.fn)}; "
            f"refusing to overwrite it with {_qualified(fn)}: rename one of them"
        )
    FUNCTION_TOOL_REGISTRY[tool_name] = tool
    return tool


def get_function_tool(name: str) -> FunctionTool:
    """The registered tool ``name``; KeyError naming the registered ones when absent."""
    if name not in FUNCTION_TOOL_REGISTRY:
        raise KeyError(
            f"function tool '{name}' is not registered (registered: {sorted(FUNCTION_TOOL_REGISTRY)}); "
            f"load its file through {_FUNCTION_TOOL_PATH_KEY}"
        )
    return FUNCTION_TOOL_REGISTRY[name]


def schema_from_function(fn: Callable, tool_name: str) -> OpenAIFunctionToolSchema:
    """The OpenAI schema of ``fn`` from its signature and Google-style docstring (see the module docstring).

    Raises:
        ValueError: ``*args``/``**kwargs``, a missing type hint or docstring line (the message names ``fn``).
    """
    from transformers.utils import get_json_schema  # heavy import, only when a function tool is built

    variadic = [
        p.name for p in inspect.signature(fn).parameters.values() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if variadic:
        raise ValueError(
            f"function tool '{tool_name}' ({_qualified(fn)}) has variadic parameters {variadic}, which a "
            "JSON schema cannot express: declare each parameter by name"
        )
    try:
        raw = get_json_schema(fn)
    except Exception as exc:  # transformers' DocstringParsingException / TypeHintParsingException
        raise ValueError(
            f"function tool '{tool_name}' ({_qualified(fn)}): cannot infer its schema: {exc}. Give every parameter "
            "a type hint and a line under 'Args:' in a Google-style docstring, or pass schema= to @function_tool"
        ) from exc
    raw["function"]["name"] = tool_name
    return OpenAIFunctionToolSchema.model_validate(raw)


def load_function_tools_from_path(path: str) -> list[FunctionTool]:
    """Import the file at ``path`` once and return its tools (decorated functions, else those in ``__all__``).

    Raises:
        FileNotFoundError: no such file.
        RuntimeError: importing it raised.
        ValueError: it defines no tool, or a schema cannot be inferred.
    """
    absolute = os.path.abspath(os.path.expanduser(path))
    if absolute in _LOADED_PATHS:
        return _LOADED_PATHS[absolute]
    module = load_module_from_path(path, key=_FUNCTION_TOOL_PATH_KEY)
    decorated = [tool for tool in FUNCTION_TOOL_REGISTRY.values() if tool.fn.__module__ == module.__name__]
    tools = decorated or _tools_listed_in_all(module, path)
    logger.info("loaded %d function tool(s) from %s: %s", len(tools), path, [tool.name for tool in tools])
    _LOADED_PATHS[absolute] = tools
    return tools


def _tools_listed_in_all(module: Any, path: str) -> list[FunctionTool]:
    exported = getattr(module, "__all__", None)
    if not exported:
        raise ValueError(
            f"{_FUNCTION_TOOL_PATH_KEY}='{path}' defines no tool: decorate the tool functions with "
            "@function_tool (from hybridrl.tools.function_tool import function_tool) or list them in __all__"
        )
    not_functions = [name for name in exported if not inspect.isfunction(getattr(module, name, None))]
    if not_functions:
        raise ValueError(f"{_FUNCTION_TOOL_PATH_KEY}='{path}': __all__ names {not_functions}, which are not functions")
    return [register_function(getattr(module, name)) for name in exported]


def normalize_function_tool_return(value: Any) -> tuple[ToolResponse, float, dict]:
    """A function's return value as ``(response, reward, metrics)`` (see the module docstring).

    A tuple must have 1 to 3 items; a ``None`` reward is 0.0 and ``None`` metrics are ``{}``.
    """
    if isinstance(value, tuple):
        if not 1 <= len(value) <= 3:
            raise TypeError(
                f"a function tool returned a tuple of length {len(value)}: return (response,), "
                "(response, reward) or (response, reward, metrics)"
            )
        reward = value[1] if len(value) > 1 else None
        metrics = value[2] if len(value) > 2 else None
        return _as_response(value[0]), 0.0 if reward is None else float(reward), dict(metrics or {})
    return _as_response(value), 0.0, {}


def _as_response(value: Any) -> ToolResponse:
    if isinstance(value, ToolResponse):
        return value
    if isinstance(value, str):
        return ToolResponse(text=value)
    if isinstance(value, dict):
        return ToolResponse(text=json.dumps(value, ensure_ascii=False))
    return ToolResponse(text=str(value))


def _same_definition(a: Callable, b: Callable) -> bool:
    """The same function, or the same source definition imported twice (a file loaded by path and by import)."""
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    if a is b or code_a is None or code_b is None:
        return a is b
    return (a.__qualname__, code_a.co_filename, code_a.co_firstlineno) == (
        b.__qualname__,
        code_b.co_filename,
        code_b.co_firstlineno,
    )


def _qualified(fn: Callable) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"
