"""The OpenAI-compatible endpoint an agent-loop worker serves during training ("agents in your own code").

One per ``AgentLoopWorker`` process, started on first use, on ``127.0.0.1`` and a free port. Requests go through
the worker's ``AsyncLLMServerManager`` to the rollout servers (the trajectory id is the routing key, so a
conversation stays on one server). For trajectories the trainer started (``begin``) the endpoint:

- samples with the run's settings: the client's ``temperature/top_p/top_k`` are dropped and the request carries
  the agent-loop call's layer instead, so the server resolves ``rollout.temperature/top_p/top_k`` (``val_kwargs``
  when validating, greedy when the call asks for it) once, and the engine's log-probs are those of the
  distribution the trainer assumes; a seed per completion derived from the trajectory's seed;
- bounds each chain of the conversation to ``rollout.response_length`` tokens after its first prompt: a request's
  ``max_tokens`` is clamped to what is left (never refused: an agent written for another deployment may ask for
  more), and a request past the budget gets an empty completion with ``finish_reason: length``; the first prompt
  of a chain must fit ``rollout.prompt_length`` (else 400 ``context_length_exceeded``);
- records every completion (prompt ids, generated ids, log-probs) for ``end``; the prompts of a faithful replay
  continue the previous prompt token for token (``continuation.py``).
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import Any

from hybridrl.generation.records import META_INFO_KEY, TokenOutput
from hybridrl.generation.tool_parser import ToolParser
from hybridrl.serving.continuation import ContinuationRenderer
from hybridrl.serving.errors import OpenAIError
from hybridrl.serving.openai_app import TRAJECTORY_HEADER, build_openai_app
from hybridrl.serving.types import CompletionRecord, ServeLimits

__all__ = ["TrainingEndpoint", "endpoint_for"]

MAX_REQUEST_BYTES = 8 * 1024 * 1024  # request bodies above this are refused (413): no chat history needs more
MAX_CHOICES = 8  # `n` per request; a trajectory's samples come from its first choice (more are recorded too)
UNBOUNDED = 2**31 - 1  # app-level token limits in training (the per-chain checks of _generate apply instead)
RUN_SETTINGS = ("temperature", "top_p", "top_k")  # a trajectory's values of these replace the client's


@dataclass
class _Trajectory:
    sampling_params: dict[str, Any]
    seed: int | None
    records: list[CompletionRecord] = field(default_factory=list)
    chains: list[tuple[int, list[int]]] = field(default_factory=list)  # (first prompt length, ids so far)
    calls: int = 0

    def remaining(self, prompt_ids: list[int], budget: int) -> int:
        for first, ids in self.chains:
            if prompt_ids[: len(ids)] == ids:
                return budget - (len(prompt_ids) - first)
        return budget

    def extend(self, prompt_ids: list[int], response_ids: list[int]) -> None:
        for i, (first, ids) in enumerate(self.chains):
            if prompt_ids[: len(ids)] == ids:
                self.chains[i] = (first, prompt_ids + response_ids)
                return
        self.chains.append((len(prompt_ids), prompt_ids + response_ids))


class _Recorder:
    def __init__(self, endpoint: TrainingEndpoint) -> None:
        self.endpoint = endpoint

    def record(self, trajectory_id: str, record: CompletionRecord) -> None:
        trajectory = self.endpoint.trajectories.get(trajectory_id)
        if record.choice_index == 0:
            self.endpoint.renderer.observe(trajectory_id, record.response_ids, record.tools is not None, record.tools)
        if trajectory is not None:
            trajectory.records.append(record)


class TrainingEndpoint:
    """See the module docstring.

    Args:
        config: the whole run config.
        server_manager: the worker's ``AsyncLLMServerManager``.
        tokenizer: the policy's tokenizer.
    """

    def __init__(self, config: Any, server_manager: Any, tokenizer: Any) -> None:
        rollout = config.actor_rollout_ref.rollout
        self.server_manager = server_manager
        self.response_length = int(rollout.response_length)
        self.api_key = rollout.agent.custom_rollout_function.api_key
        self.trajectories: dict[str, _Trajectory] = {}
        template_kwargs = dict(config.data.get("apply_chat_template_kwargs") or {})
        parser = ToolParser.get_tool_parser(str(rollout.multi_turn.format), tokenizer)
        self.renderer = ContinuationRenderer(tokenizer, template_kwargs, parser)
        self.prompt_length = int(rollout.prompt_length)
        # the app's own bounds are wide open: _generate clamps max_tokens and checks prompts per chain
        limits = ServeLimits(max_tokens=UNBOUNDED, max_prompt_tokens=UNBOUNDED, max_request_bytes=MAX_REQUEST_BYTES,
                             max_n=MAX_CHOICES)
        self.model_name = str(config.actor_rollout_ref.model.path).rstrip("/").split("/")[-1]
        self.app = build_openai_app(self._generate, tokenizer, model_name=self.model_name, limits=limits,
                                    api_key=self.api_key, tool_format=str(rollout.multi_turn.format),
                                    chat_template_kwargs=template_kwargs, recorder=_Recorder(self),
                                    renderer=self.renderer, accept_any_model=True)
        self.base_url: str | None = None
        self._server: Any = None
        self._task: asyncio.Task | None = None

    async def start(self) -> str:
        """Serve on 127.0.0.1 (a free port) in this event loop; returns the ``/v1`` base URL."""
        import uvicorn

        if self.base_url is not None:
            return self.base_url
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False))
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the start-up error
            await asyncio.sleep(0.01)
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        return self.base_url

    def client(self, trajectory_id: str, timeout_s: float) -> Any:
        """An ``openai.AsyncOpenAI`` whose every request carries ``trajectory_id`` (no retries)."""
        import openai

        return openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key or "EMPTY", max_retries=0,
                                  timeout=timeout_s, default_headers={TRAJECTORY_HEADER: trajectory_id})

    def begin(self, trajectory_id: str, sampling_params: dict[str, Any]) -> None:
        """Start recording ``trajectory_id``, sampled with the agent loop's ``sampling_params``: its call's layer
        (``meta_info``: validation, greedy) and any ``RUN_SETTINGS`` it names go with every request, the client's
        ``RUN_SETTINGS`` are dropped (the server resolves the rest from the rollout config); ``seed`` per trajectory."""
        params = {k: v for k, v in sampling_params.items() if k in (*RUN_SETTINGS, META_INFO_KEY)}
        self.trajectories[trajectory_id] = _Trajectory(params, sampling_params.get("seed"))

    def end(self, trajectory_id: str) -> list[CompletionRecord]:
        """Stop recording; the trajectory's completions in call order."""
        self.renderer.forget(trajectory_id)
        trajectory = self.trajectories.pop(trajectory_id, None)
        return [] if trajectory is None else trajectory.records

    async def _generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]) -> TokenOutput:
        trajectory = self.trajectories.get(request_id)
        remaining = self._remaining(trajectory, prompt_ids)
        if remaining <= 0:
            return TokenOutput(token_ids=[], log_probs=[], stop_reason="length")
        params = {**sampling_params, "max_tokens": min(int(sampling_params["max_tokens"]), remaining)}
        if trajectory is not None:
            params = {k: v for k, v in params.items() if k not in RUN_SETTINGS}
            params.update(trajectory.sampling_params, logprobs=True)
            if trajectory.seed is not None:
                params["seed"] = int(trajectory.seed) * 1_009 + trajectory.calls
            trajectory.calls += 1
        output = await self.server_manager.generate(request_id, prompt_ids=prompt_ids, sampling_params=params)
        if trajectory is not None:
            trajectory.extend(list(prompt_ids), list(output.token_ids))
        return output


    def _remaining(self, trajectory: _Trajectory | None, prompt_ids: list[int]) -> int:
        """Tokens this request may generate: what its chain has left; a new chain's prompt must fit."""
        remaining = self.response_length if trajectory is None else trajectory.remaining(prompt_ids, self.response_length)
        continues = trajectory is not None and remaining < self.response_length
        if not continues and len(prompt_ids) > self.prompt_length:
            raise OpenAIError(400, f"the prompt has {len(prompt_ids)} tokens; a conversation may start with at most "
                              f"{self.prompt_length} (rollout.prompt_length)", param="messages",
                              code="context_length_exceeded")
        return remaining


_ENDPOINTS: dict[int, TrainingEndpoint] = {}


async def endpoint_for(config: Any, server_manager: Any, tokenizer: Any) -> TrainingEndpoint:
    """This process's endpoint over ``server_manager`` (started on first use)."""
    endpoint = _ENDPOINTS.get(id(server_manager))
    if endpoint is None:
        endpoint = _ENDPOINTS[id(server_manager)] = TrainingEndpoint(config, server_manager, tokenizer)
    await endpoint.start()
    return endpoint
