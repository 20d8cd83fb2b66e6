"""Routing of agent-loop generation requests to the rollout servers (verl's ``AsyncLLMServerManager``).

Every request of one conversation carries the conversation's ``request_id`` and goes to the server that served
its first turn (that server may still hold the conversation's prefix in its cache); a new conversation goes to
the server with the fewest requests in flight. The sticky table is an LRU of ``max_cache_size`` entries.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["AsyncLLMServerManager"]

DEFAULT_MAX_CACHE_SIZE = 10_000  # conversations remembered for sticky routing (verl's LRU size)


class AsyncLLMServerManager:
    """Sticky, least-loaded routing over server handles.

    Args:
        server_handles: objects with ``generate.remote(request_id=, prompt_ids=, sampling_params=)`` returning an
            awaitable (Ray actor handles of the rollout workers), one per rollout replica.
        max_cache_size: conversations remembered for sticky routing.
    """

    def __init__(self, server_handles: list[Any], max_cache_size: int = DEFAULT_MAX_CACHE_SIZE) -> None:
        if not server_handles:
            raise ValueError("AsyncLLMServerManager needs at least one server handle")
        self.server_handles = list(server_handles)
        self.max_cache_size = int(max_cache_size)
        self.in_flight = [0] * len(self.server_handles)
        self._sticky: OrderedDict[str, int] = OrderedDict()

    def choose_server(self, request_id: str) -> int:
        """The server index of ``request_id``: its earlier server, else the least loaded (lowest index on ties)."""
        index = self._sticky.get(request_id)
        if index is None:
            index = min(range(len(self.in_flight)), key=lambda i: self.in_flight[i])
            self._sticky[request_id] = index
            if len(self._sticky) > self.max_cache_size:
                self._sticky.popitem(last=False)
        else:
            self._sticky.move_to_end(request_id)
        return index

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any]) -> Any:
        """``TokenOutput`` of one generation (the server's ``generate``)."""
        index = self.choose_server(request_id)
        self.in_flight[index] += 1
        try:
            return await self.server_handles[index].generate.remote(
                request_id=request_id, prompt_ids=list(prompt_ids), sampling_params=dict(sampling_params)
            )
        finally:
            self.in_flight[index] -= 1
