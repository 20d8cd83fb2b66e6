"""verl 0.5's path of the tool registry (``verl.tools.utils.tool_registry``); see :mod:`hybridrl.tools.tool_registry`."""

from hybridrl.tools.tool_registry import ToolType, get_tool_class, initialize_tools_from_config, load_all_tools

__all__ = ["ToolType", "get_tool_class", "initialize_tools_from_config", "load_all_tools"]
