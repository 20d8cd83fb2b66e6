"""Conversation prefix cache of the hf async server: the KV cache of a conversation's last finished turn.

All turns of one agent conversation are sent with the same ``request_id`` (the agent loop's server manager
routes them to the same server), and turn ``k + 1``'s prompt is turn ``k``'s prompt + its response + the
tool/user tokens that follow. When a request finishes, its row's KV cache (left padding removed) is kept here
with the token ids it covers: ``prompt + response[:-1]`` (the last sampled token was never fed to the model).
A later request with the same ``request_id`` whose prompt starts with those ids prefills only its new suffix
on top of the cached KV (see ``HFBatcher``); any other prompt takes the normal full prefill.

Entries are taken (removed) when a request with their ``request_id`` is admitted: a conversation's next turn
stores a fresh, longer entry when it finishes. The cache is bounded (least recently stored entry evicted
first) and must be cleared whenever the weights change: the server clears it on ``stop()``, which the worker
calls before every sleep / weight sync.

Layers: ``[(keys [H, L, D], values [H, L, D]), ...]`` for ``L = len(token_ids)``, one pair per model layer.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

# Default bounds. Memory per cached token = 2 × layers × kv_heads × head_dim × bytes per value: about 46 kB for
# SmolLM2-135M in fp32, 57 kB for a 7B Qwen2 in bf16, so the token bound keeps the cache to a few GB at most.
PREFIX_CACHE_MAX_ENTRIES = 1024  # conversations remembered (one entry each)
PREFIX_CACHE_MAX_TOKENS = 65_536  # cached tokens over all entries


@dataclass
class CachedPrefix:
    """The KV of one finished request: ``layers`` covers exactly ``token_ids`` (positions ``0 .. L-1``)."""

    token_ids: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]


def usable_prefix_length(cached_ids: list[int], prompt_ids: list[int]) -> int:
    """Tokens of ``prompt_ids`` whose KV can come from an entry covering ``cached_ids``; 0 when none can.

    The prompt must start with all of ``cached_ids``; at least one prompt token is always left to prefill (it
    gives the next-token logits), so a prompt equal to ``cached_ids`` reuses ``len(cached_ids) - 1`` tokens.
    """
    length = len(cached_ids)
    if length == 0 or len(prompt_ids) < length or prompt_ids[:length] != cached_ids:
        return 0
    return min(length, len(prompt_ids) - 1)


class ConversationPrefixCache:
    """LRU of ``CachedPrefix`` by ``request_id``, at most ``max_entries`` entries and ``max_tokens`` tokens.

    ``max_entries=0`` or ``max_tokens=0`` disables it (nothing is stored).
    """

    def __init__(self, max_entries: int = PREFIX_CACHE_MAX_ENTRIES, max_tokens: int = PREFIX_CACHE_MAX_TOKENS):
        if max_entries < 0 or max_tokens < 0:
            raise ValueError(f"prefix cache bounds must be >= 0, got {max_entries} entries / {max_tokens} tokens")
        self.max_entries, self.max_tokens = int(max_entries), int(max_tokens)
        self._entries: OrderedDict[str, CachedPrefix] = OrderedDict()
        self.total_tokens = 0

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.max_tokens > 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._entries

    def clear(self) -> None:
        self._entries.clear()
        self.total_tokens = 0

    def put(self, request_id: str, entry: CachedPrefix) -> None:
        """Store ``entry`` as the newest one (replacing ``request_id``'s), then evict down to the bounds.

        An entry longer than ``max_tokens`` on its own is not stored.
        """
        self._remove(request_id)
        if not self.enabled or len(entry.token_ids) > self.max_tokens:
            return
        self._entries[request_id] = entry
        self.total_tokens += len(entry.token_ids)
        while len(self._entries) > self.max_entries or self.total_tokens > self.max_tokens:
            self._remove(next(iter(self._entries)))

    def peek_usable(self, request_id: str, prompt_ids: list[int]) -> int:
        """``usable_prefix_length`` against ``request_id``'s entry (0 without one); the entry stays."""
        entry = self._entries.get(request_id)
        return usable_prefix_length(entry.token_ids, prompt_ids) if entry is not None else 0

    def take(self, request_id: str, prompt_ids: list[int]) -> tuple[CachedPrefix | None, int]:
        """Remove ``request_id``'s entry; return it with its usable length, or ``(None, 0)`` when it cannot
        serve ``prompt_ids`` (no entry, or the prompt does not start with its ids)."""
        entry = self._remove(request_id)
        usable = usable_prefix_length(entry.token_ids, prompt_ids) if entry is not None else 0
        return (entry, usable) if usable > 0 else (None, 0)

    def _remove(self, request_id: str) -> CachedPrefix | None:
        entry = self._entries.pop(request_id, None)
        if entry is not None:
            self.total_tokens -= len(entry.token_ids)
        return entry
