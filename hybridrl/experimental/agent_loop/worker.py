"""``AgentLoopWorker``: a Ray actor that plays many conversations at once on one asyncio event loop.

``generate_sequences(batch)`` starts one agent loop per row (the loop named by the row's ``agent_name``), all
concurrently; their generation requests go through the ``AsyncLLMServerManager`` to the rollout servers and their
tool calls run in the ``ToolExecutor``'s threads, so neither a long generation nor a slow tool holds up the other
conversations. The result is the padded rollout batch of ``postprocess.outputs_to_batch`` in the batch's row order.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from hybridrl.experimental.agent_loop.agent_loop import AgentLoopOutput, load_agent_loop_config, resolve_agent_loop
from hybridrl.experimental.agent_loop.postprocess import agent_metrics, outputs_to_batch
from hybridrl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from hybridrl.generation.records import META_INFO_KEY
from hybridrl.generation.sampling import call_layer, call_sampling_params, trajectory_seed
from hybridrl.protocol import DataProto
from hybridrl.protocol.keys import ROLLOUT_ROW_KEY  # the input row of each sample, when rows gave != 1 sample

__all__ = ["AgentLoopWorker", "ROLLOUT_ROW_KEY", "ROW_OFFSET_KEY", "default_agent_name", "load_tools_and_interactions"]

ROW_OFFSET_KEY = "agent_row_offset"  # meta_info: position of the batch's first row in the step's batch (seeds)


def default_agent_name(rollout_config: Any) -> str:
    """The loop of rows without an ``agent_name``: ``rollout.agent.default_agent_loop``, except while that is still
    ``single_turn_agent``: ``openai_agent`` when ``agent.custom_rollout_function.path`` names the user's agent,
    ``tool_agent`` when ``multi_turn.enable`` (a single turn cannot call tools)."""
    name = str(rollout_config.agent.default_agent_loop)
    if name != "single_turn_agent":
        return name
    if rollout_config.agent.custom_rollout_function.path:
        return "openai_agent"
    return "tool_agent" if bool(rollout_config.multi_turn.enable) else name


def load_tools_and_interactions(multi_turn: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Tools (``tool_config_path`` YAML + ``function_tool_path`` functions) and interactions of the run, by name."""
    if not bool(multi_turn.enable):
        return {}, {}
    from hybridrl.tools.utils.tool_registry import load_all_tools

    tool_path, function_path = multi_turn.tool_config_path, multi_turn.function_tool_path
    tools = load_all_tools(str(tool_path) if tool_path else None, str(function_path) if function_path else None)
    by_name = {tool.name: tool for tool in tools}  # load_all_tools rejects duplicate names
    interactions: dict[str, Any] = {}
    if multi_turn.interaction_config_path:
        from hybridrl.interactions.utils.interaction_registry import initialize_interactions_from_config

        interactions = initialize_interactions_from_config(str(multi_turn.interaction_config_path))
    return by_name, interactions


class AgentLoopWorker:
    """Runs agent loops (a Ray actor; any method being async makes it an asyncio actor).

    Args:
        config: the whole run config (resolved).
        server_handles: the rollout servers (Ray handles with ``generate``), one per replica.
    """

    def __init__(self, config: Any, server_handles: list[Any], reward_loop_worker_handles: list[Any] | None = None
                 ) -> None:
        from hybridrl.utils.fs import copy_to_local
        from hybridrl.utils.tokenizer import hf_tokenizer

        self.config = config
        self.rollout_config = config.actor_rollout_ref.rollout
        model = config.actor_rollout_ref.model
        self.tokenizer = hf_tokenizer(
            copy_to_local(model.get("tokenizer_path") or model.path),
            trust_remote_code=bool(model.trust_remote_code),
            custom_chat_template=model.get("custom_chat_template"),
        )
        self.server_manager = AsyncLLMServerManager(server_handles)
        self.tools, self.interactions = load_tools_and_interactions(self.rollout_config.multi_turn)
        if self.rollout_config.agent.agent_loop_config_path:
            load_agent_loop_config(str(self.rollout_config.agent.agent_loop_config_path))
        self.default_agent = default_agent_name(self.rollout_config)
        self._tool_executor: Any = None
        # reward workers (RewardLoopWorker handles): each sample is scored as soon as its loop ends
        self.reward_loop_worker_handles = list(reward_loop_worker_handles or [])

    @property
    def tool_executor(self) -> Any:
        if self._tool_executor is None:
            from hybridrl.tools.executor import ToolExecutor

            self._tool_executor = ToolExecutor()
        return self._tool_executor

    async def generate_sequences(self, batch: DataProto) -> DataProto:
        """One trajectory per row of ``batch`` (non-tensor columns: ``raw_prompt`` and the row's extras)."""
        if "raw_prompt" not in batch.non_tensor_batch:
            raise KeyError("rollout.mode=async needs the chat messages of each row: set data.return_raw_chat=True")
        meta = batch.meta_info
        # verl's keys (temperature, top_p, top_k, logprobs) for loops that read them, as the one resolver sees the
        # call; the call's layer goes down with every request, so the server's resolution agrees with them
        base = {**call_sampling_params(self.rollout_config, meta), META_INFO_KEY: call_layer(meta)}
        offset = int(meta.get(ROW_OFFSET_KEY, 0))
        names = batch.non_tensor_batch.get("agent_name")
        tasks = []
        for i in range(len(batch)):
            row = {key: values[i] for key, values in batch.non_tensor_batch.items()}
            name = names[i] if names is not None and names[i] else self.default_agent
            seed = trajectory_seed(int(self.rollout_config.seed), meta, offset + i)
            row_columns = {key: values[i : i + 1] for key, values in batch.non_tensor_batch.items()}
            tasks.append(self._run_and_score(str(name), {**base, "seed": seed}, row, row_columns, offset + i))
        per_row = [out if isinstance(out, list) else [out] for out in await asyncio.gather(*tasks)]
        rows = [i for i, outs in enumerate(per_row) for _ in outs]
        outputs: list[AgentLoopOutput] = [o for outs in per_row for o in outs]
        if not outputs:
            raise RuntimeError(f"no agent loop of these {len(batch)} rows produced a sample")
        result = outputs_to_batch(
            outputs, prompt_length=int(self.rollout_config.prompt_length),
            response_length=int(self.rollout_config.response_length), pad_token_id=self.tokenizer.pad_token_id,
            input_non_tensors={key: values[rows] for key, values in batch.non_tensor_batch.items()},
        )
        if len(rows) != len(batch):  # a loop returned several samples (or none) for a row: say where each came from
            result.non_tensor_batch[ROLLOUT_ROW_KEY] = np.array([offset + i for i in rows], dtype=np.int64)
        per_trajectory = [outs[0] for outs in per_row if outs]  # a row's samples share its metrics
        result.meta_info["metrics"] = agent_metrics(per_trajectory)
        result.meta_info["agent_timing"] = {
            "generate_sequences": [o.metrics.generate_sequences for o in per_trajectory],
            "tool_calls": [o.metrics.tool_calls for o in per_trajectory],
        }
        return result

    async def _run_and_score(self, agent_name: str, sampling_params: dict[str, Any], row: dict[str, Any],
                             row_columns: dict[str, np.ndarray], row_index: int) -> Any:
        """:meth:`_run`; with reward workers, each sample's reward (``{"reward_score", "reward_extra_info"}``)
        is computed right away and kept as its ``STREAMED_REWARD_KEY`` column."""
        out = await self._run(agent_name, sampling_params, row)
        if not self.reward_loop_worker_handles:
            return out
        from hybridrl.experimental.reward_loop.reward_loop import STREAMED_REWARD_KEY

        handle = self.reward_loop_worker_handles[row_index % len(self.reward_loop_worker_handles)]
        for sample in out if isinstance(out, list) else [out]:
            one = outputs_to_batch(
                [sample], prompt_length=int(self.rollout_config.prompt_length),
                response_length=int(self.rollout_config.response_length), pad_token_id=self.tokenizer.pad_token_id,
                input_non_tensors=row_columns,
            )
            sample.extra_fields[STREAMED_REWARD_KEY] = await handle.compute_score.remote(one)
        return out

    async def _run(self, agent_name: str, sampling_params: dict[str, Any],
                   row: dict[str, Any]) -> AgentLoopOutput | list[AgentLoopOutput]:
        loop_cls = resolve_agent_loop(agent_name)
        loop = loop_cls(
            trainer_config=self.config, server_manager=self.server_manager, tokenizer=self.tokenizer,
            tools=self.tools, interactions=self.interactions, tool_executor=self.tool_executor,
        )
        row = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in row.items() if k != "agent_name"}
        return await loop.run(sampling_params, **row)
