"""Build tools from verl's tool YAML (``multi_turn.tool_config_path``) and function files.

verl's format, one entry per tool::

    tools:
      - class_name: hybridrl.tools.gsm8k_tool.Gsm8kTool     # dotted import path; "verl." reads as "hybridrl."
        config:
          type: native          # the only kind here (verl's "mcp" is not supported); may be omitted
          timeout: 30           # optional: seconds per call in ToolExecutor (executor.DEFAULT_TOOL_TIMEOUT_S)
        tool_schema:            # optional when the class supplies its schema
          type: function
          function: {name: calc_gsm8k_reward, description: ..., parameters: {...}}

The class is called as ``cls(config=<config dict>, tool_schema=<OpenAIFunctionToolSchema | None>)``.
This module is verl 0.9's ``verl.tools.tool_registry``; verl 0.5's path ``hybridrl.tools.utils.tool_registry``
re-exports it.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from omegaconf import DictConfig, OmegaConf
from pydantic import ValidationError

from hybridrl.tools.base_tool import BaseTool
from hybridrl.tools.class_path import import_class_path
from hybridrl.tools.config_file import read_entry_list
from hybridrl.tools.function_tool import FunctionTool, load_function_tools_from_path
from hybridrl.tools.schemas import OpenAIFunctionToolSchema

__all__ = ["ToolType", "get_tool_class", "initialize_tools_from_config", "load_all_tools"]


class ToolType(Enum):
    NATIVE = "native"


def get_tool_class(cls_name: str) -> type:
    """The class at the dotted path ``cls_name`` (``verl.`` prefix read as ``hybridrl.``)."""
    return import_class_path(cls_name, where="tool class", base=BaseTool)


def initialize_tools_from_config(tools_config_file: str) -> list[BaseTool]:
    """One tool per entry of the YAML file's ``tools`` list, in file order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unreadable YAML, no ``tools`` list, a bad entry (message names the file and entry),
            or two tools with the same name.
    """
    entries = _read_tool_entries(tools_config_file)
    tools = [_build_tool(entry, f"tools[{index}] of {tools_config_file}") for index, entry in enumerate(entries)]
    _check_unique_names(tools, tools_config_file)
    return tools


def load_all_tools(tool_config_path: str | None, function_tool_path: str | None) -> list[BaseTool]:
    """The YAML tools then the function tools (verl 0.9); ValueError when a name appears in both."""
    native_tools = initialize_tools_from_config(tool_config_path) if tool_config_path else []
    function_tools: list[FunctionTool] = load_function_tools_from_path(function_tool_path) if function_tool_path else []
    declared = {tool.name for tool in native_tools}
    collisions = sorted(tool.name for tool in function_tools if tool.name in declared)
    if collisions:
        raise ValueError(
            f"function tool name(s) {collisions} from '{function_tool_path}' are also declared in "
            f"'{tool_config_path}': every tool name must be unique; rename one of them"
        )
    return [*native_tools, *function_tools]


def _read_tool_entries(path: str) -> list[Any]:
    return read_entry_list(
        path,
        kind="tool",
        config_key="multi_turn.tool_config_path",
        list_key="tools",
        entry_shape="{class_name, config, tool_schema}",
    )


def _build_tool(entry: Any, where: str) -> BaseTool:
    if not isinstance(entry, DictConfig) or "class_name" not in entry:
        raise ValueError(f"{where}: each entry needs `class_name` (and `config`, `tool_schema`), got {entry!r}")
    config = OmegaConf.to_container(entry.config, resolve=True) if entry.get("config") is not None else {}
    if not isinstance(config, dict):
        raise ValueError(f"{where}: `config` must be a mapping, got {config!r}")
    tool_type = config.get("type") or ToolType.NATIVE.value
    if tool_type != ToolType.NATIVE.value:
        raise ValueError(
            f"{where}: config.type '{tool_type}' is not supported (only 'native'; verl's MCP tools are not ported)"
        )
    tool_class = import_class_path(entry.class_name, where, base=BaseTool)
    schema = _parse_schema(entry, where)
    try:
        tool = tool_class(config=config, tool_schema=schema)
    except Exception as exc:
        raise ValueError(f"{where}: {entry.class_name}(config=..., tool_schema=...) raised {exc!r}") from exc
    return tool


def _parse_schema(entry: DictConfig, where: str) -> OpenAIFunctionToolSchema | None:
    if entry.get("tool_schema") is None:
        return None
    raw = OmegaConf.to_container(entry.tool_schema, resolve=True)
    try:
        return OpenAIFunctionToolSchema.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(f"{where}: invalid tool_schema: {exc}") from exc


def _check_unique_names(tools: list[BaseTool], path: str) -> None:
    names = [tool.name for tool in tools]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"tool config file '{path}' declares the tool name(s) {duplicates} more than once")
