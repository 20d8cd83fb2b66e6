"""The tool-call parsers: the interface and one module per model family, each registered with
``ToolParser.register`` at verl 0.9's name (the table: :mod:`hybridrl.generation.tool_parser`, verl's path).

- ``parser.py``: ``ToolParser`` (the registry), ``FunctionCall``, ``ParsedToolCalls``, the tool-schema lookups.
- ``hermes.py`` (``hermes``).
- ``argument_values.py``: argument values written as text (XML-style formats) read back as JSON values.
- ``qwen3_coder.py`` (``qwen3_coder``), ``gpt_oss.py`` (``gpt-oss``), ``glm.py`` (``glm``), ``kimi.py`` (``kimi``),
  ``deepseek_v4.py`` (``deepseek_v4``), ``gemma4.py`` (``gemma4``), ``seed.py`` (``seed``), ``minimax.py``
  (``minimax``).
"""

from hybridrl.generation.tool_formats.deepseek_v4 import DeepSeekV4ToolParser
from hybridrl.generation.tool_formats.gemma4 import Gemma4ToolParser
from hybridrl.generation.tool_formats.glm import GLMToolParser
from hybridrl.generation.tool_formats.gpt_oss import GptOssToolParser
from hybridrl.generation.tool_formats.hermes import HermesToolParser
from hybridrl.generation.tool_formats.kimi import KimiToolParser
from hybridrl.generation.tool_formats.minimax import MiniMaxToolParser
from hybridrl.generation.tool_formats.qwen3_coder import Qwen3XMLToolParser
from hybridrl.generation.tool_formats.seed import SeedToolParser

__all__ = [
    "DeepSeekV4ToolParser",
    "GLMToolParser",
    "Gemma4ToolParser",
    "GptOssToolParser",
    "HermesToolParser",
    "KimiToolParser",
    "MiniMaxToolParser",
    "Qwen3XMLToolParser",
    "SeedToolParser",
]
