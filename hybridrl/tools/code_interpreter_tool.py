"""``code_interpreter(code: str)``: run model-written Python in hybridrl's sandbox and return its output.

Every call runs in a fresh throw-away process of :func:`hybridrl.utils.reward_score.sandbox.run_python`
(rlimits, scrubbed environment, temporary work dir; network/filesystem isolation where the kernel allows,
see that module). Nothing is kept between calls. Config keys (all optional; absent ones keep the
:class:`~hybridrl.utils.reward_score.sandbox.SandboxLimits` defaults):

    default_timeout: wall-clock seconds per run (verl's SandboxFusionTool key)
    memory_limit_mb: address-space limit (verl's key)
    cpu_time_s:      CPU seconds

``timeout`` (the executor's limit per call, :mod:`hybridrl.tools.executor`) should exceed ``default_timeout``.

Response text: stdout; on failure also stderr and ``[exit code N]`` or ``[timed out after S s]``;
``[no output]`` when there is none. Metrics: ``{"code_ok": 0 or 1, "code_timed_out": 0 or 1}``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from hybridrl.tools.base_tool import BaseTool
from hybridrl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from hybridrl.utils.reward_score.sandbox import SandboxLimits, SandboxResult, run_python

CODE_INTERPRETER_SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "code_interpreter",
            "description": "Run a Python program and return what it prints (stdout, and stderr on failure).",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": "The Python program to run."}},
                "required": ["code"],
            },
        },
    }
)

# tool YAML config key -> SandboxLimits field
_LIMIT_KEYS = {"default_timeout": "wall_time_s", "memory_limit_mb": "memory_mb", "cpu_time_s": "cpu_time_s"}


def sandbox_limits(config: dict) -> SandboxLimits:
    """The SandboxLimits of a tool config: the keys present override the defaults."""
    overrides = {field: config[key] for key, field in _LIMIT_KEYS.items() if config.get(key) is not None}
    return dataclasses.replace(SandboxLimits(), **overrides)


def format_run(result: SandboxResult, limits: SandboxLimits) -> str:
    """The text the model sees for one run (see the module docstring)."""
    parts = [result.stdout] if result.stdout else []
    if not result.ok:
        if result.stderr:
            parts.append(result.stderr)
        if result.timed_out:
            parts.append(f"[timed out after {limits.wall_time_s:g} s]")
        else:
            parts.append(f"[exit code {result.returncode}]")
    return "\n".join(part.rstrip("\n") for part in parts) if parts else "[no output]"


class CodeInterpreterTool(BaseTool):
    """Runs ``parameters["code"]`` in the sandbox; ``tool_schema`` defaults to :data:`CODE_INTERPRETER_SCHEMA`."""

    def __init__(self, config: dict | None = None, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema or CODE_INTERPRETER_SCHEMA)
        self.limits = sandbox_limits(self.config)

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        code = parameters.get("code")
        if not isinstance(code, str):
            return (
                ToolResponse(text="Error: give the program as a string in `code`"),
                0.0,
                {"code_ok": 0, "code_timed_out": 0},
            )
        # The run blocks (a subprocess); a thread keeps the caller's event loop free.
        result = await asyncio.to_thread(run_python, code, "", self.limits)
        metrics = {"code_ok": int(result.ok), "code_timed_out": int(result.timed_out)}
        return ToolResponse(text=format_run(result, self.limits)), 0.0, metrics
