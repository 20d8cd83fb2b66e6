"""``single_turn_agent``: one generation for the row's chat prompt (the sync rollout's behaviour, in server mode)."""

from __future__ import annotations

import time
from typing import Any
from uuid import uuid4

from hybridrl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from hybridrl.experimental.agent_loop.trajectory import Trajectory
from hybridrl.generation.chat_tokens import ChatTokens

__all__ = ["SingleTurnAgentLoop"]


@register("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    """The row's ``raw_prompt`` → chat-template ids → one generation of up to ``rollout.response_length`` tokens."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = list(kwargs["raw_prompt"])
        chat = ChatTokens(self.tokenizer, chat_template_kwargs=self.apply_chat_template_kwargs)
        trajectory = Trajectory(
            chat.prompt_ids(messages), self.response_length, with_logprobs=bool(sampling_params.get("logprobs"))
        )
        metrics = AgentLoopMetrics()
        start = time.perf_counter()
        output = await self.server_manager.generate(
            uuid4().hex, prompt_ids=trajectory.prompt_ids,
            sampling_params={**sampling_params, "max_tokens": self.response_length},
        )
        metrics.generate_sequences = time.perf_counter() - start
        trajectory.add_model_tokens(output.token_ids, output.log_probs)
        return trajectory.output(metrics)
