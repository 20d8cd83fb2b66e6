"""Helpers of the endpoint tests: a scripted ``generate``, a recorder, and the real ``openai`` client on an app."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import httpx
import openai

from hybridrl.serving import CompletionRecord, ServeLimits, build_openai_app
from hybridrl.workers.rollout.async_server import TokenOutput

MODEL = "tiny-chat"
API_KEY = "sk-test-123"
LIMITS = ServeLimits(max_tokens=128, max_prompt_tokens=1000, max_request_bytes=20_000, max_n=4)


@dataclass
class ScriptedGenerate:
    """A fake engine: answers call ``k`` with ``replies[k % len(replies)]`` encoded + the EOS id, with
    log-probs ``-(k + 1) / 10 - j / 100`` for token ``j`` (distinct per call and token), or raises ``error``."""

    tokenizer: object
    replies: list[str]
    error: Exception | None = None
    calls: list[tuple[str, list[int], dict]] = field(default_factory=list)
    outputs: list[TokenOutput] = field(default_factory=list)

    async def __call__(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict) -> TokenOutput:
        # keyword-only, as AsyncLLMServerManager.generate
        k = len(self.calls)
        self.calls.append((request_id, list(prompt_ids), dict(sampling_params)))
        if self.error is not None:
            raise self.error
        ids = self.tokenizer.encode(self.replies[k % len(self.replies)], add_special_tokens=False)
        ids = [*ids, self.tokenizer.eos_token_id][: sampling_params["max_tokens"]]
        log_probs = [-(k + 1) / 10 - j / 100 for j in range(len(ids))] if sampling_params["logprobs"] else None
        stop_reason = "stop" if ids[-1] == self.tokenizer.eos_token_id else "length"
        output = TokenOutput(token_ids=ids, log_probs=log_probs, stop_reason=stop_reason)
        self.outputs.append(output)
        return output


class ListRecorder:
    """Keeps every ``(trajectory_id, CompletionRecord)``."""

    def __init__(self) -> None:
        self.records: list[tuple[str, CompletionRecord]] = []

    def record(self, trajectory_id: str, record: CompletionRecord) -> None:
        self.records.append((trajectory_id, record))


def asgi_http_client(app, **kwargs) -> httpx.AsyncClient:
    """An httpx client calling ``app`` in-process (no socket)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve.test", **kwargs)


@contextlib.asynccontextmanager
async def openai_client(app, api_key: str = API_KEY, **kwargs):
    """The real ``openai.AsyncOpenAI`` talking to ``app`` through an ASGI transport (no retries)."""
    async with asgi_http_client(app) as http_client:
        yield openai.AsyncOpenAI(
            base_url="http://serve.test/v1", api_key=api_key, http_client=http_client, max_retries=0, **kwargs
        )


def make_app(generate, tokenizer, recorder=None, **kwargs):
    """The endpoint serving ``MODEL`` with ``LIMITS`` and ``API_KEY`` (overridable)."""
    options = {"model_name": MODEL, "limits": LIMITS, "api_key": API_KEY, "recorder": recorder, **kwargs}
    return build_openai_app(generate, tokenizer, **options)
