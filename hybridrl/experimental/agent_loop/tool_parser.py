"""verl's import path of the tool-call parsers; the code lives in ``hybridrl.generation.tool_parser``."""

from hybridrl.generation.tool_parser import FunctionCall, HermesToolParser, ParsedToolCalls, ToolParser

__all__ = ["FunctionCall", "HermesToolParser", "ParsedToolCalls", "ToolParser"]
