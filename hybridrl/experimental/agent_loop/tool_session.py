"""The tools of one conversation: instances created on first use, calls run off the event loop, rewards at the end.

verl's ``ToolAgentLoop`` creates and releases a tool instance around every call; hybridrl keeps one instance per
tool for the whole conversation (created on the first call with the row's ``tools_kwargs.<tool>.create_kwargs``,
``calc_reward`` and ``release`` at the end), so stateful tools (a game, a sandbox session) see every call of the
conversation, as in verl 0.5's SGLang multi-turn rollout.

Failures never escape: an unknown tool, arguments that are not a JSON object, a tool that raises or times out
each become the tool message's text (``"Error ..."``) and count in ``tool_errors``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from hybridrl.experimental.agent_loop.agent_loop import AgentLoopMetrics
from hybridrl.tools.executor import ToolError

logger = logging.getLogger(__name__)

__all__ = ["ToolSession", "truncate_tool_response"]

_TRUNCATED = "...(truncated)"


def truncate_tool_response(text: str, max_length: int, side: str) -> str:
    """Keep at most ``max_length`` characters of ``text`` (``multi_turn.max_tool_response_length``), cutting on
    ``side`` (``multi_turn.tool_response_truncate_side``): ``left`` keeps the end, ``right`` the start,
    ``middle`` both ends."""
    if max_length is None or len(text) <= int(max_length):
        return text
    max_length = int(max_length)
    if side == "left":
        return "(truncated)..." + text[-max_length:]
    if side == "right":
        return text[:max_length] + _TRUNCATED
    if side == "middle":
        head = max_length // 2
        return text[:head] + _TRUNCATED + text[len(text) - (max_length - head):]
    raise ValueError(
        f"actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side={side!r}; use left, right or middle"
    )


class ToolSession:
    """Tool instances and calls of one conversation.

    Args:
        tools: tool name → ``BaseTool``.
        tools_kwargs: the row's ``tools_kwargs`` (``{tool: {create_kwargs, execute_kwargs, calc_reward_kwargs,
            release_kwargs}}``).
        executor: ``hybridrl.tools.executor.ToolExecutor``.
        metrics: the trajectory's metrics (per-tool calls, errors, seconds).
    """

    def __init__(self, tools: dict[str, Any], tools_kwargs: dict[str, Any] | None, executor: Any,
                 metrics: AgentLoopMetrics) -> None:
        self.tools = tools
        self.tools_kwargs = dict(tools_kwargs or {})
        self.executor = executor
        self.metrics = metrics
        self.instances: dict[str, str] = {}
        self.step_rewards: list[float] = []  # the reward of each call, in call order (verl's tool_rewards)

    def _kwargs(self, tool_name: str, phase: str) -> dict[str, Any]:
        return dict((self.tools_kwargs.get(tool_name) or {}).get(phase) or {})

    async def call(self, name: str, arguments: str) -> str:
        """The text of the tool message answering one call (``arguments``: the call's JSON string)."""
        tool = self.tools.get(name)
        if tool is None:
            self.metrics.count("tool_errors")
            return f"Error: unknown tool {name!r}; available tools: {sorted(self.tools)}"
        try:
            parameters = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
        except (TypeError, ValueError) as err:
            parameters = err
        if not isinstance(parameters, dict):
            self.metrics.count("tool_errors")
            return f"Error: the arguments of {name} must be a JSON object, got {arguments!r}"
        if name not in self.instances:
            try:
                self.instances[name] = await self.executor.create(tool, create_kwargs=self._kwargs(name, "create_kwargs"))
            except ToolError as err:
                self.metrics.record_tool(name, 0.0, error=True)
                self.metrics.count("tool_errors")
                return str(err)
        result = await self.executor.call(tool, self.instances[name], parameters, **self._kwargs(name, "execute_kwargs"))
        self.metrics.record_tool(name, result.seconds, result.error is not None, result.metrics)
        if result.error is not None:
            self.metrics.count("tool_errors")
        self.metrics.count("tool_calls")
        self.step_rewards.append(float(result.reward))
        return result.text

    async def close(self) -> dict[str, float]:
        """``calc_reward`` then ``release`` every instance; returns tool name → final reward."""
        rewards = {}
        for name, instance_id in self.instances.items():
            tool = self.tools[name]
            try:
                rewards[name] = await self.executor.calc_reward(tool, instance_id,
                                                                **self._kwargs(name, "calc_reward_kwargs"))
            except ToolError as err:  # the conversation is over: a failing reward must not lose the rollout
                self.metrics.count("tool_errors")
                rewards[name] = float("nan")
                logger.warning("%s", err)
            await self.executor.release(tool, instance_id, **self._kwargs(name, "release_kwargs"))
        self.instances.clear()
        return rewards
