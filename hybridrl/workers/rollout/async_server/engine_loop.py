"""The server shell shared by the step-driven engines (hf, vLLM): a request queue and one engine thread.

Callers (any thread, or an asyncio loop through ``generate``) ``submit`` requests; they queue under a lock.
The engine thread hands queued requests to a ``StepEngine`` and calls its ``step()`` while work exists,
sleeping on a condition variable when idle. Each step returns the requests that finished; their futures are
resolved from the engine thread. ``stop()`` lets in-flight and queued requests finish, joins the thread and
clears the engine's cached state (``forget_cached_state``: weights may change before the next ``start()``).
An exception raised by an engine step fails every pending future with that exception (nothing hangs); the
engine is then reset and the loop keeps serving later requests. A request the engine refuses (``add`` raises,
e.g. a prompt longer than the model allows) fails alone. A cancelled future (``generate``'s task cancelled)
drops its request at the next step.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from hybridrl.generation.records import RequestParams, TokenOutput, check_prompt_ids
from hybridrl.generation.sampling import resolve_sampling

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
        """Accept a request (it may wait inside the engine until a slot frees); raise to refuse it alone."""

    @abstractmethod
    def step(self) -> list[tuple[ServerRequest, TokenOutput]]:
        """Run one step; return the requests that finished in it with their outputs. Requests whose future
        was cancelled (an asyncio caller gave up) are dropped and free their slot."""

    @abstractmethod
    def has_work(self) -> bool:
        """True while any accepted request has not finished."""

    @abstractmethod
    def reset(self) -> list[ServerRequest]:
        """Drop every accepted request (after an error); return them so their futures can be failed."""

    def forget_cached_state(self) -> None:  # noqa: B027 - optional hook, nothing to forget by default
        """Drop what the engine keeps between requests (e.g. a prefix cache). ``stop()`` calls it once drained:
        the worker stops the server before every sleep and weight sync, after which cached KV would be stale."""


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
        """The request's parameters (clear errors for bad keys; see ``hybridrl.generation.sampling``)."""
        return resolve_sampling(
            self.rollout_config,
            request=sampling_params,
            eos_token_ids=self.engine.eos_token_ids,
            pad_token_id=self.engine.pad_token_id,
        )


class ThreadedStepServer(AsyncRolloutServer):
    """``AsyncRolloutServer`` driving a ``StepEngine`` from one background thread.

    ``on_idle``, when given, is called from the engine thread each time the engine runs out of work (the OpenAI
    server hands freed memory back to the system there; a training worker passes none).
    """

    def __init__(
        self, engine: Any, rollout_config: Any, step_engine: StepEngine, on_idle: Callable[[], Any] | None = None
    ) -> None:
        super().__init__(engine, rollout_config)
        self.step_engine = step_engine
        self.on_idle = on_idle
        self._queue: list[ServerRequest] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._counter = itertools.count()
        self._in_engine: dict[str, ServerRequest] = {}  # handed to the engine, not resolved (guarded by _wake)

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
        self.step_engine.forget_cached_state()  # the engine thread has exited: nothing else touches it
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
            self._wake.notify_all()
        return request.future

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
            for request in taken:
                self._hand_over(request)
            try:
                finished = self.step_engine.step()
            except BaseException as error:  # noqa: BLE001 - every waiting caller gets the error
                logger.exception("async rollout server: the engine step failed; failing its requests")
                dropped = self.step_engine.reset()
                with self._wake:  # also what the engine lost track of: no caller waits forever
                    dropped += list(self._in_engine.values())
                self._fail(dropped, error)
                continue
            for request, output in finished:
                self._forget(request)
                if not request.future.done():  # a caller may have cancelled it meanwhile
                    request.future.set_result(output)
            if self.on_idle is not None and not self.step_engine.has_work():
                self.on_idle()

    def _hand_over(self, request: ServerRequest) -> None:
        """``step_engine.add(request)``; a request the engine refuses fails alone."""
        try:
            self.step_engine.add(request)
        except Exception as error:  # noqa: BLE001
            self._fail([request], error)
            return
        with self._wake:
            self._in_engine[request.key] = request
        request.future.add_done_callback(lambda _: self._forget(request))  # cancelled ones too

    def _forget(self, request: ServerRequest) -> None:
        with self._wake:
            self._in_engine.pop(request.key, None)

    def _fail(self, requests: list[ServerRequest], error: BaseException) -> None:
        for request in requests:
            self._forget(request)
            if not request.future.done():
                request.future.set_exception(error)
