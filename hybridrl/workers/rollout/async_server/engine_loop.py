"""The server shell shared by the step-driven engines (hf, vLLM): a request queue and one engine thread.

Callers (any thread, or an asyncio loop through ``generate``) ``submit`` requests; they queue under a lock.
The engine thread hands queued requests to a ``StepEngine`` and calls its ``step()`` while work exists,
sleeping on a condition variable when idle. Each step returns the requests that finished; their futures are
resolved from the engine thread. ``stop()`` lets in-flight and queued requests finish, then joins the thread.
An exception raised by the engine fails every pending future with that exception (nothing hangs); the
engine is then reset and the loop keeps serving later requests.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from hybridrl.workers.rollout.async_server.request import (
    RequestParams,
    TokenOutput,
    check_prompt_ids,
    resolve_request_params,
)

logger = logging.getLogger(__name__)


@dataclass
class ServerRequest:
    """One queued or running request. ``key`` is unique per server (the caller's ``request_id`` may repeat
    across turns of a conversation); ``future`` resolves to a ``TokenOutput``."""

    key: str
    request_id: str
    prompt_ids: list[int]
    params: RequestParams
    future: Future = field(default_factory=Future)


class StepEngine(ABC):
    """An engine that advances all its running requests by one scheduling step at a time."""

    @abstractmethod
    def add(self, request: ServerRequest) -> None:
        """Accept a request (it may wait inside the engine until a slot frees)."""

    @abstractmethod
    def step(self) -> list[tuple[ServerRequest, TokenOutput]]:
        """Run one step; return the requests that finished in it with their outputs."""

    @abstractmethod
    def has_work(self) -> bool:
        """True while any accepted request has not finished."""

    @abstractmethod
    def reset(self) -> list[ServerRequest]:
        """Drop every accepted request (after an error); return them so their futures can be failed."""


class AsyncRolloutServer(ABC):
    """Token-in/token-out server over one rollout engine (the interface every backend provides)."""

    def __init__(self, engine: Any, rollout_config: Any) -> None:
        self.engine = engine
        self.rollout_config = rollout_config

    @abstractmethod
    def start(self) -> None:
        """Start serving (after weight sync)."""

    @abstractmethod
    def stop(self) -> None:
        """Finish every submitted request, then stop serving."""

    @abstractmethod
    def submit(self, request_id: str, prompt_ids: list[int], sampling_params: Mapping[str, Any]) -> Future:
        """Queue one request; the future resolves to its ``TokenOutput`` (or raises the engine's error)."""

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: Mapping[str, Any]) -> TokenOutput:
        """``submit`` awaited from an asyncio loop."""
        return await asyncio.wrap_future(self.submit(request_id, prompt_ids, sampling_params))

    def resolve(self, sampling_params: Mapping[str, Any]) -> RequestParams:
        """The request's parameters (clear errors for bad keys; see ``request.py``)."""
        return resolve_request_params(
            sampling_params,
            self.rollout_config,
            eos_token_ids=self.engine.eos_token_ids,
            pad_token_id=self.engine.pad_token_id,
        )


class ThreadedStepServer(AsyncRolloutServer):
    """``AsyncRolloutServer`` driving a ``StepEngine`` from one background thread."""

    def __init__(self, engine: Any, rollout_config: Any, step_engine: StepEngine) -> None:
        super().__init__(engine, rollout_config)
        self.step_engine = step_engine
        self._queue: list[ServerRequest] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._counter = itertools.count()
        self._in_flight: dict[str, ServerRequest] = {}

    def start(self) -> None:
        with self._wake:
            if self._thread is not None:
                raise RuntimeError("the async rollout server is already running")
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="hybridrl-rollout-server", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._wake:
            thread, self._stopping = self._thread, True
            self._wake.notify_all()
        if thread is not None:
            thread.join()
        with self._wake:
            self._thread = None

    def submit(self, request_id: str, prompt_ids: list[int], sampling_params: Mapping[str, Any]) -> Future:
        request = ServerRequest(
            key=f"{request_id}#{next(self._counter)}",
            request_id=str(request_id),
            prompt_ids=check_prompt_ids(prompt_ids),
            params=self.resolve(sampling_params),
        )
        with self._wake:
            if self._thread is None or self._stopping:
                raise RuntimeError("the async rollout server is not running: call start() before submit()")
            self._queue.append(request)
            self._in_flight[request.key] = request
            self._wake.notify_all()
        return request.future

    @property
    def num_in_flight(self) -> int:
        """Requests submitted and not yet resolved."""
        with self._wake:
            return len(self._in_flight)

    # ---- the engine thread ---------------------------------------------------------------------

    def _take_queue(self) -> list[ServerRequest] | None:
        """Wait for work; the queued requests (maybe none while the engine is busy), None to exit."""
        with self._wake:
            while not self._queue and not self.step_engine.has_work():
                if self._stopping:
                    return None
                self._wake.wait()
            taken, self._queue = self._queue, []
            return taken

    def _run(self) -> None:
        while True:
            taken = self._take_queue()
            if taken is None:
                return
            try:
                for request in taken:
                    self.step_engine.add(request)
                finished = self.step_engine.step()
            except BaseException as error:  # noqa: BLE001 - every waiting caller gets the error
                logger.exception("async rollout server: the engine step failed; failing its requests")
                self._fail(self.step_engine.reset() + taken, error)
                continue
            for request, output in finished:
                self._finish(request)
                request.future.set_result(output)

    def _finish(self, request: ServerRequest) -> None:
        with self._wake:
            self._in_flight.pop(request.key, None)

    def _fail(self, requests: list[ServerRequest], error: BaseException) -> None:
        for request in requests:
            self._finish(request)
            if not request.future.done():
                request.future.set_exception(error)
