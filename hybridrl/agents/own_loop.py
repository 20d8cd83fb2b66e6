"""A user's coroutine run on its own thread and event loop, so a blocking call inside it (``time.sleep``, blocking
I/O inside ``async def``) stalls its own trajectory only.

    outcome = await run_on_own_loop(make_coroutine, timeout_s)   # Outcome(value, blocked_s)

The caller's loop (the agent-loop worker's, which also serves the training endpoint) just awaits the result with
the deadline. A heartbeat on the function's loop measures the longest time the function kept that loop from
running (``blocked_s``). Past the deadline ``RolloutTimeout`` is raised and the function's task is cancelled: it
stops at its next ``await``; one blocked in a synchronous call stops once that call returns, on its own thread,
with nothing waiting for it. Objects bound to an event loop (``asyncio.Lock``, a client already used elsewhere)
cannot be shared between calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

BLOCK_REPORT_S = 1.0  # a function that keeps its loop from running this long is reported as blocking
_HEARTBEAT_S = 0.05


@dataclass(frozen=True)
class Outcome:
    """What the coroutine returned, and the longest time (s) it kept its event loop from running."""

    value: Any
    blocked_s: float


class RolloutTimeout(asyncio.TimeoutError):
    """The coroutine ran past its deadline; ``blocked_s``: its longest loop stall, the current one included.
    ``blocking``: it was blocking its loop at the deadline (stalled for half of ``timeout_s``, or ``BLOCK_REPORT_S``)."""

    def __init__(self, timeout_s: float, blocked_s: float) -> None:
        super().__init__(f"ran past {timeout_s} s (its event loop was blocked for up to {blocked_s:.1f} s)")
        self.timeout_s, self.blocked_s = timeout_s, blocked_s
        self.blocking = blocked_s >= min(BLOCK_REPORT_S, timeout_s / 2)


class _Heartbeat:
    """Ticks every ``_HEARTBEAT_S`` on the function's loop; a late tick is a stall of that loop."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.longest = 0.0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(_HEARTBEAT_S)
            now = time.monotonic()
            self.longest = max(self.longest, now - self.last - _HEARTBEAT_S)
            self.last = now

    def stalled_s(self) -> float:
        """The longest stall so far, counting the one in progress (read from another thread)."""
        return max(self.longest, time.monotonic() - self.last - _HEARTBEAT_S)


class _OwnLoop:
    """One coroutine on a fresh thread and event loop; ``result`` resolves with its value or error."""

    def __init__(self, make_coroutine: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        self.make_coroutine = make_coroutine
        self.result: Future = Future()
        self.heartbeat = _Heartbeat()
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        threading.Thread(target=self._thread_main, name="hybridrl-rollout-function", daemon=True).start()

    async def _main(self) -> Any:
        with self._lock:
            self._task, self._loop = asyncio.current_task(), asyncio.get_running_loop()
        beat = asyncio.ensure_future(self.heartbeat.run())
        try:
            return await self.make_coroutine()
        finally:
            beat.cancel()

    def _thread_main(self) -> None:
        try:
            value = asyncio.run(self._main())
        except BaseException as error:  # noqa: BLE001 - handed to the waiting loop
            with contextlib.suppress(InvalidStateError):  # the caller gave up (a timeout): nobody waits
                self.result.set_exception(error)
        else:
            with contextlib.suppress(InvalidStateError):
                self.result.set_result(value)
        finally:
            with self._lock:
                self._loop = None

    def cancel(self) -> None:
        """Cancel the coroutine's task (it stops at its next await, on its own thread)."""
        with self._lock:
            if self._loop is not None and self._task is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    self._loop.call_soon_threadsafe(self._task.cancel)


async def run_on_own_loop(make_coroutine: Callable[[], Coroutine[Any, Any, Any]], timeout_s: float) -> Outcome:
    """Run ``make_coroutine()`` on its own thread and loop (see the module docstring); its error is re-raised.

    Raises:
        RolloutTimeout: it ran past ``timeout_s`` (it is then cancelled, without waiting for it).
    """
    call = _OwnLoop(make_coroutine)
    try:
        value = await asyncio.wait_for(asyncio.wrap_future(call.result), timeout_s)
    except asyncio.TimeoutError:
        call.cancel()
        raise RolloutTimeout(timeout_s, call.heartbeat.stalled_s()) from None
    except asyncio.CancelledError:  # the caller was cancelled: so is the function
        call.cancel()
        raise
    return Outcome(value, call.heartbeat.longest)
