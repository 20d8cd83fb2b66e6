"""The records of the OpenAI-compatible endpoint: its limits, the engine call it wraps, what it records.

generate(request_id, prompt_ids=, sampling_params=) -> TokenOutput  the engine (an async rollout server)
ServeLimits                                                          request bounds (from the config)
CompletionRecorder.record(trajectory_id, CompletionRecord)           one call per returned choice
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from hybridrl.generation.records import TokenOutput


class GenerateFn(Protocol):
    """The engine call: ``AsyncRolloutServer.generate`` or the agent loop's ``AsyncLLMServerManager.generate``
    (both take ``prompt_ids`` / ``sampling_params`` by keyword). ``request_id`` is the trajectory id."""

    def __call__(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any]
    ) -> Awaitable[TokenOutput]: ...


@dataclass(frozen=True)
class ServeLimits:
    """Bounds on one request (a request beyond them gets an OpenAI error, never reaches the engine).

    Attributes:
        max_tokens: most tokens one choice may generate (``rollout.response_length``); a larger
            ``max_tokens`` / ``max_completion_tokens`` is a 400, an absent one means this many.
        max_prompt_tokens: most prompt tokens after the chat template (``rollout.prompt_length``); 400 beyond.
        max_request_bytes: most bytes of a request body (``server.max_request_bytes``); 413 beyond.
        max_n: most choices per request (``server.max_n``); 400 beyond.
        context_length: the model's context (``max_position_embeddings``), None when unknown: a prompt must
            leave room for one generated token, and prompt + an explicit ``max_tokens`` must fit (400 beyond).
        max_inflight_sequences: most sequences (``n`` × prompts of every request being answered) at once; a
            request that would exceed it gets a 429 with ``Retry-After`` (None: unbounded).
    """

    max_tokens: int
    max_prompt_tokens: int
    max_request_bytes: int
    max_n: int
    context_length: int | None = None
    max_inflight_sequences: int | None = None

    def prompt_limit(self) -> int:
        """Most prompt tokens: ``max_prompt_tokens``, clamped to the context less one generated token."""
        if self.context_length is None:
            return self.max_prompt_tokens
        return min(self.max_prompt_tokens, self.context_length - 1)

    @classmethod
    def from_config(cls, rollout_config: Any, server_config: Any, context_length: int | None = None) -> ServeLimits:
        """From a rollout section (``prompt_length``, ``response_length``, ``max_num_seqs``) and a server section
        (``max_request_bytes``, ``max_n``, ``max_inflight_sequences``), as in ``configs/serve.yaml``;
        ``context_length``: the model's ``max_position_embeddings``."""
        return cls(
            max_tokens=int(rollout_config.response_length),
            max_prompt_tokens=int(rollout_config.prompt_length),
            max_request_bytes=int(server_config.max_request_bytes),
            max_n=int(server_config.max_n),
            context_length=context_length,
            max_inflight_sequences=inflight_bound(rollout_config, server_config),
        )


# the default bound on in-flight sequences: this many engine batches (rollout.max_num_seqs) running or queued
INFLIGHT_BATCHES = 2


def inflight_bound(rollout_config: Any, server_config: Any) -> int:
    """``server.max_inflight_sequences``, else ``INFLIGHT_BATCHES`` × ``rollout.max_num_seqs`` (one engine batch
    running and one waiting for a slot)."""
    configured = server_config.get("max_inflight_sequences")
    if configured is not None:
        return int(configured)
    return INFLIGHT_BATCHES * int(rollout_config.max_num_seqs)


@dataclass(frozen=True)
class CompletionRecord:
    """One choice the endpoint returned, as the engine saw and produced it.

    Attributes:
        prompt_ids: the prompt token ids sent to the engine (chat template applied).
        response_ids: the generated ids returned to the client (EOS included when hit; cut after a ``stop``
            string, see ``choices.py``).
        response_logprobs: one log-prob per ``response_ids`` entry (always asked of the engine when a
            recorder is set), or None when the engine gave none.
        finish_reason: the OpenAI finish reason returned (``stop`` | ``length`` | ``tool_calls`` | ``abort``).
        request_messages: the chat request's messages as received (None for ``/v1/completions``).
        tools: the request's tool schemas (None when it had none).
        choice_index: the choice's ``index`` in the response.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float] | None
    finish_reason: str
    request_messages: list[dict] | None
    tools: list[dict] | None
    choice_index: int


class CompletionRecorder(Protocol):
    """Receives every choice the endpoint returns, keyed by the request's trajectory id.

    ``record`` is called on the server's event loop before the response is sent: keep it quick.
    """

    def record(self, trajectory_id: str, record: CompletionRecord) -> None: ...
