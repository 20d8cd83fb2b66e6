"""Tools for multi-turn rollouts, at verl's import paths (``verl.tools``).

- :mod:`hybridrl.tools.schemas`: OpenAI function schemas, :class:`ToolResponse`.
- :mod:`hybridrl.tools.base_tool`: :class:`BaseTool` (create / execute / calc_reward / release).
- :mod:`hybridrl.tools.tool_registry` (also ``hybridrl.tools.utils.tool_registry``): tools from verl's YAML.
- :mod:`hybridrl.tools.function_tool`: plain Python functions as tools (``multi_turn.function_tool_path``).
- :mod:`hybridrl.tools.executor`: :class:`ToolExecutor`, runs calls off the event loop with a timeout.
- Tools: :mod:`gsm8k_tool` (``calc_gsm8k_reward``), :mod:`calculator_tool` (``calculator``),
  :mod:`code_interpreter_tool` (``code_interpreter``, in hybridrl's sandbox).
"""
