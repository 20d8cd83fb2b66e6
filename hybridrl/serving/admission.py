"""What a request may hold while it is answered: a share of the in-flight sequence bound, and its client.

    admission.hold(sequences)          429 (Retry-After) past ``ServeLimits.max_inflight_sequences``
    until_disconnected(request, work)  ``work``, cancelled as soon as the client goes away

A request holds ``n`` × its prompts sequences from its admission until its response is built. Cancelling the
work cancels its engine calls (the async server drops a cancelled request at its next step), so a burst of
clients that time out leaves no generation behind them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

from hybridrl.serving.errors import OpenAIError, invalid_request

T = TypeVar("T")

RETRY_AFTER_S = 1  # what a refused client is told to wait (the openai client honours it when it retries)
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a request whose client left (never seen by that client)


class Admission:
    """Counts the sequences being generated (one event loop: no lock) against ``bound`` (None: unbounded)."""

    def __init__(self, bound: int | None) -> None:
        self.bound = bound
        self.in_flight = 0

    @contextlib.contextmanager
    def hold(self, sequences: int) -> Iterator[None]:
        """Hold ``sequences`` for the block; 429 when they do not fit now, 400 when they never could."""
        if self.bound is not None:
            if sequences > self.bound:
                raise invalid_request(
                    f"the request asks for {sequences} sequences (n × prompts); this server generates at most "
                    f"{self.bound} at once (server.max_inflight_sequences)",
                    "n",
                )
            if self.in_flight + sequences > self.bound:
                raise OpenAIError(
                    429,
                    f"the server is busy: {self.in_flight} of its {self.bound} sequences are being generated "
                    f"(server.max_inflight_sequences); retry after {RETRY_AFTER_S} s",
                    type="rate_limit_error",
                    code="server_busy",
                    headers={"Retry-After": str(RETRY_AFTER_S)},
                )
        self.in_flight += sequences
        try:
            yield
        finally:
            self.in_flight -= sequences


async def _disconnected(receive: Any) -> None:
    """Returns when the ASGI server reports the client gone (``http.disconnect``); the body is already read."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def until_disconnected(receive: Any, work: Awaitable[T]) -> T:
    """``work``'s result, unless the client disconnects first: then ``work`` is cancelled and a 499 raised.

    ``receive``: the request's ASGI receive channel (``Request.receive``), read after the whole body.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler is cancelled (a shutdown): the work goes with it
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise OpenAIError(CLIENT_CLOSED_REQUEST, "the client closed the request", code="client_closed_request")
    return task.result()
