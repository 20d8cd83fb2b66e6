"""Tool-call parsers of generated text: verl's ``verl.experimental.agent_loop.tool_parser`` names, re-exported at
``hybridrl.experimental.agent_loop.tool_parser`` too. The code lives in :mod:`hybridrl.generation.tool_formats`.

``actor_rollout_ref.rollout.multi_turn.format`` picks a parser by name (:meth:`ToolParser.get_tool_parser`); the
formats, at verl 0.9's registry names:

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

What a parse returns, and the contract every format keeps: :mod:`hybridrl.generation.tool_formats.parser`.
"""

from hybridrl.generation.tool_formats import (
    DeepSeekV4ToolParser,
    Gemma4ToolParser,
    GLMToolParser,
    GptOssToolParser,
    HermesToolParser,
    KimiToolParser,
    MiniMaxToolParser,
    Qwen3XMLToolParser,
    SeedToolParser,
)
from hybridrl.generation.tool_formats.parser import (
    FunctionCall,
    ParsedToolCalls,
    ToolParser,
    ToolSchemas,
    function_call,
    tool_function,
    tool_names,
    tool_parameters,
)

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
    "ToolSchemas",
    "function_call",
    "tool_function",
    "tool_names",
    "tool_parameters",
]
