"""Agent loops: server-mode rollouts of single-turn, multi-turn and tool-calling conversations (verl's package).

    AgentLoopManager (driver)                       rollout.mode=async's generate_sequences
      └─ AgentLoopWorker × rollout.agent.num_workers   Ray asyncio actors, many conversations each
           └─ agent loop per row (agent_name)         single_turn_agent | tool_agent | yours (@register)
                └─ AsyncLLMServerManager ─► AsyncActorRolloutRefWorker.generate  (token ids in, token ids out)

Write your own loop by subclassing :class:`AgentLoopBase` and decorating it with ``@register("name")``; rows pick
it with an ``agent_name`` column, or ``rollout.agent.default_agent_loop`` names it for all rows.
"""

from hybridrl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    load_agent_loop_config,
    register,
    resolve_agent_loop,
)
from hybridrl.experimental.agent_loop.manager import AgentLoopManager
from hybridrl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from hybridrl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from hybridrl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from hybridrl.experimental.agent_loop.worker import AgentLoopWorker

__all__ = [
    "AgentLoopBase",
    "AgentLoopManager",
    "AgentLoopMetrics",
    "AgentLoopOutput",
    "AgentLoopWorker",
    "AsyncLLMServerManager",
    "SingleTurnAgentLoop",
    "ToolAgentLoop",
    "load_agent_loop_config",
    "register",
    "resolve_agent_loop",
]
