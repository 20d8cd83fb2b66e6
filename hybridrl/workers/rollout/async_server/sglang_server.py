"""The SGLang engine's async server, on SGLang's public async API (GPU only; SGLang is imported by the engine).

``SGLangRollout.engine`` is an ``sglang.Engine``; ``await engine.async_generate(input_ids=..., sampling_params=...,
return_logprob=...)`` returns one dict per prompt (``output_ids``, ``meta_info.output_token_logprobs``,
``meta_info.finish_reason``) and SGLang batches concurrent calls itself. The server runs one private asyncio
loop in a background thread; ``submit`` schedules a coroutine on it, ``stop()`` waits for the in-flight ones.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from hybridrl.generation.records import RequestParams, TokenOutput, check_prompt_ids
from hybridrl.workers.rollout.async_server.engine_loop import AsyncRolloutServer
from hybridrl.workers.rollout.sglang_rollout import to_sglang_sampling_params


def sglang_request_kwargs(prompt_ids: list[int], params: RequestParams) -> dict[str, Any]:
    """Keyword arguments of ``engine.async_generate`` for one request (``sampling_seed`` when seeded)."""
    sampling = to_sglang_sampling_params(params.sampling)
    if params.seed is not None and not params.sampling.greedy:
        sampling["sampling_seed"] = params.seed
    return {
        "input_ids": list(prompt_ids),
        "sampling_params": sampling,
        "return_logprob": params.sampling.calculate_log_probs,
    }


def parse_sglang_output(output: Mapping[str, Any], params: RequestParams) -> TokenOutput:
    """One ``async_generate`` result → ``TokenOutput``.

    ``meta_info.finish_reason`` is ``{"type": "stop" | "length" | "abort", ...}``; the log-probs are the first
    element of each ``meta_info.output_token_logprobs`` entry ``(logprob, token_id, text)``.
    """
    if isinstance(output, list):  # a batch of one
        (output,) = output
    token_ids = [int(t) for t in output.get("output_ids", [])][: params.sampling.max_new_tokens]
    meta = output.get("meta_info", {}) or {}
    log_probs = None
    if params.sampling.calculate_log_probs:
        log_probs = [float(entry[0]) for entry in meta["output_token_logprobs"]][: len(token_ids)]
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, Mapping) else str(finish)
    reason = {"stop": "stop", "length": "length", "abort": "aborted"}.get(str(kind))
    if reason is None:
        reason = "length" if len(token_ids) >= params.sampling.max_new_tokens else "stop"
    return TokenOutput(token_ids, log_probs, reason)


class SGLangAsyncServer(AsyncRolloutServer):
    """``AsyncRolloutServer`` over a ``SGLangRollout`` (``engine.async_generate`` on a private event loop)."""

    def __init__(self, engine: Any, rollout_config: Any) -> None:
        super().__init__(engine, rollout_config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._in_flight: set[Future] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("the async rollout server is already running")
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="hybridrl-sglang-server", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
            pending = list(self._in_flight)
        for future in pending:
            future.exception()  # waits; a failed request already reached its caller
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()

    def submit(self, request_id: str, prompt_ids: list[int], sampling_params: Mapping[str, Any]) -> Future:
        params = self.resolve(sampling_params)
        kwargs = sglang_request_kwargs(check_prompt_ids(prompt_ids), params)
        with self._lock:
            if self._loop is None:
                raise RuntimeError("the async rollout server is not running: call start() before submit()")
            future = asyncio.run_coroutine_threadsafe(self._generate(kwargs, params), self._loop)
            self._in_flight.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future) -> None:
        with self._lock:
            self._in_flight.discard(future)

    async def _generate(self, kwargs: dict[str, Any], params: RequestParams) -> TokenOutput:
        output = await self.engine.engine.async_generate(**kwargs)
        return parse_sglang_output(output, params)
