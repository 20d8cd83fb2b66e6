"""verl's import path of the tool-call parsers; the code lives in ``hybridrl.generation.tool_parser`` (hermes) and
``hybridrl.generation.tool_formats`` (the other formats)."""

from hybridrl.generation.tool_formats import (
    DeepSeekV4ToolParser,
    Gemma4ToolParser,
    GLMToolParser,
    GptOssToolParser,
    KimiToolParser,
    MiniMaxToolParser,
    Qwen3XMLToolParser,
    SeedToolParser,
)
from hybridrl.generation.tool_parser import FunctionCall, HermesToolParser, ParsedToolCalls, ToolParser

__all__ = [
    "DeepSeekV4ToolParser",
    "FunctionCall",
    "GLMToolParser",
    "Gemma4ToolParser",
    "GptOssToolParser",
    "HermesToolParser",
    "KimiToolParser",
    "MiniMaxToolParser",
    "ParsedToolCalls",
    "Qwen3XMLToolParser",
    "SeedToolParser",
    "ToolParser",
]
