"""``openai_agent``: train an agent written against the OpenAI API, run as-is for each dataset row.

Config (``actor_rollout_ref.rollout.agent.custom_rollout_function``, like verl's ``custom_reward_function``)::

    path: my_agent.py        name: rollout        timeout_s: 300        api_key: null

``async def rollout(client: openai.AsyncOpenAI, row: dict) -> float | list[float]`` plays one trajectory for
``row`` (the dataset row's columns: ``raw_prompt``, ``reward_model``, ``extra_info``, ...) against ``client``, a
client of this worker's training endpoint whose requests all carry the trajectory's id, and returns its reward
(or one reward per completion, in call order). The completions it made become the training samples
(``trajectory_samples``): one per conversation chain, with the model's tokens masked in.

Each call runs on its own thread and event loop (``own_loop.py``): a synchronous sleep or blocking I/O inside
``async def rollout`` holds up its own trajectory only, and is reported by the function's name
(``agent_loop/trajectory_blocked``, when it kept its loop from running for ``BLOCK_REPORT_S`` or more). Objects
bound to an event loop (``asyncio.Lock``, clients) cannot be shared between calls: create them inside ``rollout``.

A rollout that raises, returns something else, or runs past ``timeout_s`` is counted
(``agent_loop/trajectory_errors`` / ``agent_loop/trajectory_timeouts``) and gives one placeholder sample with no
trainable token and reward 0, so the step goes on with the others.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any
from uuid import uuid4

from hybridrl.agents.own_loop import BLOCK_REPORT_S, RolloutTimeout, run_on_own_loop
from hybridrl.agents.trajectory_samples import samples_from_completions
from hybridrl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from hybridrl.experimental.agent_loop.postprocess import REWARD_SCORES_KEY
from hybridrl.generation.chat_tokens import ChatTokens
from hybridrl.serving.training_endpoint import endpoint_for
from hybridrl.utils.import_utils import load_extern_type

__all__ = ["OpenAIAgentLoop", "load_rollout_function"]

logger = logging.getLogger(__name__)
_FUNCTIONS: dict[tuple[str, str], Any] = {}


def load_rollout_function(function_config: Any) -> Any:
    """The user's ``async def rollout(client, row)`` named by ``custom_rollout_function.{path, name}``."""
    key = (str(function_config.path), str(function_config.name))
    if key not in _FUNCTIONS:
        fn = load_extern_type(key[0], key[1], key="actor_rollout_ref.rollout.agent.custom_rollout_function.path")
        if not asyncio.iscoroutinefunction(fn):
            raise TypeError(f"{key[1]} in {key[0]} must be `async def {key[1]}(client, row)` (an openai.AsyncOpenAI "
                            "client and the dataset row) returning the reward")
        _FUNCTIONS[key] = fn
    return _FUNCTIONS[key]


def _valid_reward(reward: Any) -> bool:
    values = [reward] if isinstance(reward, (int, float)) and not isinstance(reward, bool) else reward
    try:
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)
    except TypeError:
        return False


def _function_name(fn: Any) -> str:
    """``name (file:line)`` of the user's function, for messages."""
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{getattr(fn, '__qualname__', fn)}{where}"


def _report_blocking(fn: Any, trajectory_id: str, blocked_s: float, metrics: AgentLoopMetrics) -> None:
    """Count and name a rollout function that blocked its event loop (see ``own_loop.py``)."""
    metrics.count("trajectory_blocked")
    logger.warning(
        "the rollout function %s blocked its event loop for %.1f s in trajectory %s: a synchronous call (time.sleep, "
        "blocking I/O) inside `async def`; it holds up only its own trajectory, but use `await asyncio.sleep` or "
        "`await asyncio.to_thread(...)` instead", _function_name(fn), blocked_s, trajectory_id)


async def _play(rollout: Any, client: Any, row: dict[str, Any]) -> Any:
    """The user's rollout on its own loop; the client (first used there) is closed there."""
    try:
        return await rollout(client, row)
    finally:
        await client.close()


@register("openai_agent")
class OpenAIAgentLoop(AgentLoopBase):
    """Runs the configured rollout function for one row (see the module docstring)."""

    async def run(self, sampling_params: dict[str, Any], **row: Any) -> list[AgentLoopOutput]:
        function_config = self.rollout_config.agent.custom_rollout_function
        rollout = load_rollout_function(function_config)
        endpoint = await endpoint_for(self.config, self.server_manager, self.tokenizer)
        trajectory_id, metrics = f"traj-{uuid4().hex}", AgentLoopMetrics()
        timeout_s = float(function_config.timeout_s)
        endpoint.begin(trajectory_id, sampling_params)
        client = endpoint.client(trajectory_id, timeout_s)
        start, reward = time.perf_counter(), None
        try:
            outcome = await run_on_own_loop(lambda: _play(rollout, client, dict(row)), timeout_s)
            if outcome.blocked_s >= BLOCK_REPORT_S:
                _report_blocking(rollout, trajectory_id, outcome.blocked_s, metrics)
            reward = outcome.value
            if not _valid_reward(reward):
                raise TypeError(f"the rollout function returned {reward!r}; return a finite float or a list of them")
        except RolloutTimeout as timeout:
            metrics.count("trajectory_timeouts")
            if timeout.blocking:
                _report_blocking(rollout, trajectory_id, timeout.blocked_s, metrics)
            logger.warning("trajectory %s ran past custom_rollout_function.timeout_s=%s; it is skipped",
                           trajectory_id, timeout_s)
            reward = None
        except Exception as error:  # noqa: BLE001 - the user's agent: count it, keep the step
            metrics.count("trajectory_errors")
            logger.warning("trajectory %s failed (%s: %s); it is skipped", trajectory_id, type(error).__name__, error)
            reward = None
        finally:
            records = endpoint.end(trajectory_id)
        metrics.generate_sequences = time.perf_counter() - start
        first_choices = [r for r in records if r.choice_index == 0]
        metrics.count("completions", len(first_choices))
        if reward is None or not first_choices:
            return [self._placeholder(row, metrics)]
        return samples_from_completions(first_choices, reward, response_length=self.response_length, metrics=metrics)

    def _placeholder(self, row: dict[str, Any], metrics: AgentLoopMetrics) -> AgentLoopOutput:
        """A sample with nothing to train on (mask 0) and reward 0: keeps the row without teaching anything."""
        metrics.count("failed_trajectories")
        chat = ChatTokens(self.tokenizer, chat_template_kwargs=self.apply_chat_template_kwargs)
        prompt = chat.prompt_ids(list(row["raw_prompt"]))[-self.prompt_length:]
        eos = self.tokenizer.eos_token_id
        return AgentLoopOutput(prompt_ids=prompt, response_ids=[eos], response_mask=[0], response_logprobs=[0.0],
                               num_turns=1, metrics=metrics, extra_fields={REWARD_SCORES_KEY: {0: 0.0}})
