"""``tool_agent``: multi-turn generation with tool calls and (optionally) a simulated user (verl's interaction).

One conversation::

    prompt = chat template(raw_prompt, tools=schemas)
    loop:
        generate (at most what is left of response_length)             model tokens, mask 1
        stop when: the turn did not end on EOS (length), the budget or max_assistant_turns / max_user_turns is hit
        parse tool calls (multi_turn.format)
          calls      → run up to max_parallel_calls concurrently → tool messages
          malformed  → counted (parse_failures); the conversation ends, as in verl
          none       → the interaction (if the row names one) answers as the user, or the conversation ends
        append the new messages' tokens (ChatTokens.turn_ids; mask 0), unless they would exhaust the budget
    tools: calc_reward + release; interaction: finalize; tokenization sanity check (multi_turn.tokenization_sanity_check_mode)

Row columns read: ``raw_prompt``, ``tools_kwargs``, ``interaction_kwargs`` (``name`` picks the interaction).
Extra fields returned (non-tensor columns of the batch): ``turn_scores`` (interaction scores), ``tool_rewards``
(per-call step rewards) and ``tool_final_rewards`` (each tool's ``calc_reward``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any
from uuid import uuid4

from hybridrl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from hybridrl.experimental.agent_loop.tool_session import ToolSession, truncate_tool_response
from hybridrl.experimental.agent_loop.trajectory import Trajectory
from hybridrl.generation.chat_tokens import ChatTokens
from hybridrl.generation.tool_parser import ToolParser

__all__ = ["ToolAgentLoop"]

logger = logging.getLogger(__name__)


@register("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    """Multi-turn tool calling (see the module docstring). ``tool_executor`` runs the calls off the event loop."""

    def __init__(self, *args: Any, tool_executor: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        multi_turn = self.rollout_config.multi_turn
        self.max_assistant_turns = multi_turn.max_assistant_turns
        self.max_user_turns = multi_turn.max_user_turns
        self.max_parallel_calls = int(multi_turn.max_parallel_calls)
        self.max_tool_response_length = multi_turn.max_tool_response_length
        self.truncate_side = str(multi_turn.tool_response_truncate_side)
        self.sanity_check_mode = str(multi_turn.tokenization_sanity_check_mode)
        self.tool_parser = ToolParser.get_tool_parser(str(multi_turn.format), self.tokenizer)
        if tool_executor is None:
            from hybridrl.tools.executor import ToolExecutor

            tool_executor = ToolExecutor()
        self.tool_executor = tool_executor
        self.tool_schemas = [tool.get_openai_tool_schema().model_dump(exclude_none=True) for tool in self.tools.values()]

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        chat = ChatTokens(self.tokenizer, tools=self.tool_schemas or None,
                          chat_template_kwargs=self.apply_chat_template_kwargs)
        metrics = AgentLoopMetrics()
        metrics.count("tool_calls", 0.0)  # present even when no call is made: the tool-call rate counts this row
        metrics.count("parse_failures", 0.0)
        trajectory = Trajectory(chat.prompt_ids(messages), self.response_length,
                                with_logprobs=bool(sampling_params.get("logprobs")))
        session = ToolSession(self.tools, _as_dict(kwargs.get("tools_kwargs")), self.tool_executor, metrics)
        interaction, interaction_id, interaction_kwargs = await self._start_interaction(kwargs)
        turn_scores: list[float] = []
        request_id = uuid4().hex
        try:
            while True:
                new_messages = await self._one_turn(request_id, chat, trajectory, messages, session, sampling_params,
                                                    metrics, (interaction, interaction_id, interaction_kwargs),
                                                    turn_scores)
                if not new_messages:
                    break
                ids = chat.turn_ids(new_messages, trajectory.response_ids[-1])
                if not trajectory.fits(len(ids)):
                    break
                trajectory.add_context_tokens(ids)
                trajectory.user_turns += 1
                messages.extend(new_messages)
        finally:
            final_rewards = await session.close()
            if interaction is not None:
                await interaction.finalize_interaction(interaction_id, **interaction_kwargs)
        self._sanity_check(chat, messages, trajectory, metrics)
        extra = {"turn_scores": turn_scores, "tool_rewards": list(session.step_rewards),
                 "tool_final_rewards": final_rewards}
        return trajectory.output(metrics, extra)

    async def _one_turn(self, request_id: str, chat: ChatTokens, trajectory: Trajectory, messages: list[dict],
                        session: ToolSession, sampling_params: dict[str, Any], metrics: AgentLoopMetrics,
                        interaction: tuple, turn_scores: list[float]) -> list[dict[str, Any]]:
        """Generate one assistant turn; the tool/user messages that answer it ([] ends the conversation)."""
        if trajectory.remaining <= 0:
            return []
        start = time.perf_counter()
        output = await self.server_manager.generate(
            request_id, prompt_ids=trajectory.context_ids,
            sampling_params=self._turn_sampling_params(sampling_params, trajectory.remaining),
        )
        metrics.generate_sequences += time.perf_counter() - start
        trajectory.add_model_tokens(output.token_ids, output.log_probs)
        text = chat.assistant_content(output.token_ids)  # the generated text without the end-of-turn marker
        messages.append({"role": "assistant", "content": text})
        if output.stop_reason != "stop" or not output.token_ids or trajectory.remaining <= 0:
            return []
        if self._turn_budget_spent(trajectory):
            return []
        parsed = self.tool_parser.parse(text, self.tool_schemas)  # schemas: argument types (qwen3_coder), names (kimi)
        metrics.count("parse_failures", parsed.num_malformed)
        if parsed.calls and self.tools:
            return await self._call_tools(parsed.calls, session, metrics)
        if parsed.num_malformed:
            return []
        return await self._interaction_reply(interaction, messages, turn_scores)

    def _turn_sampling_params(self, sampling_params: dict[str, Any], remaining: int) -> dict[str, Any]:
        """The turn's request: the budget left, and the format's stop tokens (Gemma 4 writes on after a call
        unless ``<tool_call|>`` stops it; as verl, they join any ``stop_token_ids`` already asked for)."""
        params = {**sampling_params, "max_tokens": remaining}
        if self.tool_parser.stop_token_ids:
            asked = list(params.get("stop_token_ids") or [])
            params["stop_token_ids"] = asked + [i for i in self.tool_parser.stop_token_ids if i not in asked]
        return params

    def _turn_budget_spent(self, trajectory: Trajectory) -> bool:
        if self.max_assistant_turns and trajectory.assistant_turns >= int(self.max_assistant_turns):
            return True
        return bool(self.max_user_turns) and trajectory.user_turns >= int(self.max_user_turns)

    async def _call_tools(self, calls: list[Any], session: ToolSession, metrics: AgentLoopMetrics) -> list[dict]:
        start = time.perf_counter()
        calls = calls[: self.max_parallel_calls]
        texts = await asyncio.gather(*(session.call(call.name, call.arguments) for call in calls))
        metrics.tool_calls += time.perf_counter() - start
        return [{"role": "tool", "content": truncate_tool_response(t, self.max_tool_response_length, self.truncate_side)}
                for t in texts]

    async def _start_interaction(self, row: dict[str, Any]) -> tuple[Any, str | None, dict[str, Any]]:
        kwargs = _as_dict(row.get("interaction_kwargs"))
        if not kwargs or not self.interactions:
            return None, None, {}
        name = kwargs.get("name")
        if name is None and len(self.interactions) == 1:
            name = next(iter(self.interactions))
        if name not in self.interactions:
            raise KeyError(f"interaction_kwargs.name={name!r} is not in the interaction config "
                           f"(multi_turn.interaction_config_path); configured: {sorted(self.interactions)}")
        interaction = self.interactions[name]
        instance_id = await interaction.start_interaction(None, **kwargs)
        return interaction, instance_id, kwargs

    async def _interaction_reply(self, interaction: tuple, messages: list[dict], turn_scores: list[float]) -> list[dict]:
        handle, instance_id, kwargs = interaction
        if handle is None:
            return []
        terminate, content, score, _extra = await handle.generate_response(instance_id, messages, **kwargs)
        turn_scores.append(float(score))
        return [] if terminate else [{"role": "user", "content": str(content)}]

    def _sanity_check(self, chat: ChatTokens, messages: list[dict], trajectory: Trajectory,
                      metrics: AgentLoopMetrics) -> None:
        """``tokenization_sanity_check_mode``: compare the ids with a full re-render (counted, logged once)."""
        if self.sanity_check_mode == "disable":
            return
        mismatch = chat.check(messages, trajectory.prompt_ids + trajectory.response_ids, self.sanity_check_mode)
        metrics.count("tokenization_mismatch", float(mismatch is not None))
        if mismatch is not None and not getattr(ToolAgentLoop, "_warned", False):
            ToolAgentLoop._warned = True
            logger.warning("multi-turn tokenization differs from a full chat-template re-render (the trained ids "
                           "are the generated ones; this is a report, not a fix): %s", mismatch)


def _as_dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}
