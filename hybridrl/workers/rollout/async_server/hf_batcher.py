"""Continuous batching on a Hugging Face causal LM (the hf engine's async server).

State between steps (B running rows, T cache length, V vocabulary):

    cache           DynamicCache, keys/values [B, H, T, D], rows left-padded
    attention_mask  [B, T]  0 on each row's left padding
    next_pos        [B, 1]  position id of each row's next token
    logits          [B, V]  next-token logits of every row (ready to sample)

One ``step()``: admit waiting requests into free slots (``rollout.max_num_seqs``) by prefilling them as one
left-padded batch (at most ``rollout.max_num_batched_tokens`` padded prompt tokens to prefill, at least one
request) and merging their cache into the running one; sample one token for every row; finished rows (an EOS
id, or ``max_tokens``) leave the batch; leading columns that became padding in every row are trimmed; one
decode forward computes the next logits of the rows that remain.

Conversation prefix caching (``prefix_cache.py``): a finished row's KV is kept under its ``request_id``; an
admitted request of the same conversation whose prompt extends the cached ids ("resumed") is prefilled apart
from the others ("fresh"): the resumed rows feed only the last ``S`` tokens of their prompts (``S`` = the
longest new suffix among them) on top of their cached KV, positions continuing, so every row stays left-padded.

Sampling and log-probs follow ``decoding.sample_next_tokens`` row by row: greedy = argmax; log-probs are
``log_softmax(logits / T_lp)[token]`` of the unfiltered distribution. A request with a ``seed`` samples from
its own ``torch.Generator`` (one ``multinomial`` per row), so its tokens do not depend on who else runs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from hybridrl.generation.records import TokenOutput
from hybridrl.models.transformers.hf_cache import cache_kwarg
from hybridrl.utils.remove_padding import all_padding_columns
from hybridrl.workers.rollout.async_server.engine_loop import ServerRequest, StepEngine
from hybridrl.workers.rollout.async_server.left_padded_cache import merge_rows, row_kv, stack_prefixes, trim_leading
from hybridrl.workers.rollout.async_server.prefix_cache import CachedPrefix, ConversationPrefixCache
from hybridrl.workers.rollout.decoding import filter_logits, prefill_distinct_rows
from hybridrl.workers.rollout.hf_rollout import HFRollout, left_pad


@dataclass
class _Row:
    """One running request and what it generated so far."""

    request: ServerRequest
    generator: torch.Generator | None
    token_ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)


def sample_rows(logits: torch.Tensor, rows: list[_Row], shared: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of ``logits [B, V]`` under each row's own parameters.

    Returns ``tokens [B]`` (int64) and ``log_probs [B]`` = ``log_softmax(logits / T_lp)[token]`` (unfiltered).
    A row short of its ``min_new_tokens`` cannot pick a stop id.
    """
    logits = logits.float()
    params = [row.request.params.sampling for row in rows]
    lp_temperature = torch.tensor([p.logprob_temperature for p in params], device=logits.device).unsqueeze(-1)
    all_log_probs = torch.log_softmax(logits / lp_temperature, dim=-1)
    logits = _ban_early_stops(logits, rows, params)
    tokens = logits.argmax(dim=-1)
    groups: dict[tuple[float, int, float], list[int]] = {}
    for index, p in enumerate(params):
        if not p.greedy:
            groups.setdefault((p.temperature, p.top_k, p.top_p), []).append(index)
    for (temperature, top_k, top_p), indices in groups.items():
        probs = filter_logits(logits[indices] / temperature, top_k, top_p).softmax(dim=-1)  # [g, V]
        unseeded = [j for j, index in enumerate(indices) if rows[index].generator is None]
        if unseeded:  # one draw from the shared RNG for the whole group
            drawn = torch.multinomial(probs[unseeded], num_samples=1, generator=shared).squeeze(-1)
            tokens[[indices[j] for j in unseeded]] = drawn
        seeded = [j for j, index in enumerate(indices) if rows[index].generator is not None]
        if seeded:  # each seeded request draws its noise from its own RNG; one vectorised argmax for all
            tokens[[indices[j] for j in seeded]] = _exponential_race(probs[seeded], [rows[indices[j]] for j in seeded])
    return tokens, all_log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _ban_early_stops(logits: torch.Tensor, rows: list[_Row], params: list) -> torch.Tensor:
    """``logits [B, V]`` with the stop ids at -inf in the rows that have fewer than ``min_new_tokens`` tokens."""
    early = [
        i for i, (row, p) in enumerate(zip(rows, params)) if p.min_new_tokens and len(row.token_ids) < p.min_new_tokens
    ]
    if not early:
        return logits
    logits = logits.clone()
    for i in early:
        logits[i, list(params[i].eos_token_ids)] = float("-inf")
    return logits


def _exponential_race(probs: torch.Tensor, rows: list[_Row]) -> torch.Tensor:
    """One sample per row of ``probs [s, V]``: ``argmax(probs / E)``, ``E ~ Exp(1)`` drawn from each row's generator.

    This is how ``torch.multinomial(probs[i:i+1], 1, generator=g)`` samples on CPU: same tokens, same generator
    stream (``V`` exponential draws per call), without one ``multinomial`` call per row.
    """
    vocab = probs.shape[-1]
    noise = torch.stack(
        [
            torch.empty(vocab, dtype=probs.dtype, device=probs.device).exponential_(1, generator=r.generator)
            for r in rows
        ]
    )
    return (probs / noise).argmax(dim=-1)


def _finish_reason(row: _Row) -> str | None:
    """``"stop"`` after an EOS id (unless ignore_eos), ``"length"`` at ``max_tokens``, else None."""
    params = row.request.params.sampling
    if not params.ignore_eos and row.token_ids[-1] in params.eos_token_ids:
        return "stop"
    if len(row.token_ids) >= params.max_new_tokens:
        return "length"
    return None


def _output(row: _Row, reason: str) -> TokenOutput:
    wants_log_probs = row.request.params.sampling.calculate_log_probs
    return TokenOutput(row.token_ids, row.log_probs if wants_log_probs else None, reason)


class HFBatcher(StepEngine):
    """``StepEngine`` over an ``HFRollout``'s model (continuous batching; see the module docstring).

    Args:
        rollout: the hf engine (``model``, ``device``, ``generator`` for unseeded sampling, ``pad_token_id``).
        max_num_seqs: running-batch cap (``rollout.max_num_seqs``).
        max_prefill_tokens: padded prompt tokens one admission may prefill (``rollout.max_num_batched_tokens``).
        prefix_cache: the conversation prefix cache (default: ``ConversationPrefixCache()`` with its documented
            bounds; ``ConversationPrefixCache(0, 0)`` turns caching off).
    """

    def __init__(
        self,
        rollout: HFRollout,
        *,
        max_num_seqs: int,
        max_prefill_tokens: int,
        prefix_cache: ConversationPrefixCache | None = None,
    ) -> None:
        if max_num_seqs < 1:
            raise ValueError(f"actor_rollout_ref.rollout.max_num_seqs must be >= 1, got {max_num_seqs}")
        self.rollout = rollout
        self.max_num_seqs = int(max_num_seqs)
        self.max_prefill_tokens = int(max_prefill_tokens)
        self.prefix_cache = prefix_cache if prefix_cache is not None else ConversationPrefixCache()
        self.waiting: deque[ServerRequest] = deque()
        self._clear()

    def _clear(self) -> None:
        self.rows: list[_Row] = []
        self.cache = None
        self.attention_mask: torch.Tensor | None = None  # [B, T]
        self.next_pos: torch.Tensor | None = None  # [B, 1]
        self.logits: torch.Tensor | None = None  # [B, V]

    # ---- StepEngine ------------------------------------------------------------------------------

    def add(self, request: ServerRequest) -> None:
        """Queue ``request``; a prompt + ``max_tokens`` beyond the model's positions is refused."""
        limit = getattr(self.rollout.model.config, "max_position_embeddings", None)
        needed = len(request.prompt_ids) + request.params.sampling.max_new_tokens
        if limit is not None and needed > limit:
            raise ValueError(
                f"request {request.request_id!r}: {len(request.prompt_ids)} prompt tokens + max_tokens "
                f"{request.params.sampling.max_new_tokens} exceed the model's max_position_embeddings {limit}"
            )
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.rows)

    def reset(self) -> list[ServerRequest]:
        dropped = [row.request for row in self.rows] + list(self.waiting)
        self.waiting.clear()
        self._clear()
        self.prefix_cache.clear()
        return dropped

    def forget_cached_state(self) -> None:
        """Clear the prefix cache (the server calls this on ``stop()``: the weights may change before ``start()``)."""
        self.prefix_cache.clear()

    @torch.no_grad()
    def step(self) -> list[tuple[ServerRequest, TokenOutput]]:
        self._drop_cancelled()
        self._admit()
        if not self.rows:
            return []
        tokens, log_probs = sample_rows(self.logits, self.rows, self.rollout.generator)
        finished, keep = [], []
        for index, (row, token, log_prob) in enumerate(zip(self.rows, tokens.tolist(), log_probs.tolist())):
            row.token_ids.append(token)
            row.log_probs.append(log_prob)
            reason = _finish_reason(row)
            if reason is None:
                keep.append(index)
            else:
                finished.append((row.request, _output(row, reason)))
                self._remember(index, row)
        if len(keep) < len(self.rows):
            self._select(keep)
        if self.rows:
            self._decode(tokens[keep] if len(keep) < len(tokens) else tokens)
        return finished

    # ---- batch surgery -----------------------------------------------------------------------------

    def _drop_cancelled(self) -> None:
        """Forget requests whose caller cancelled them (their rows leave the batch, freeing slots)."""
        if any(r.future.cancelled() for r in self.waiting):
            self.waiting = deque(r for r in self.waiting if not r.future.cancelled())
        keep = [i for i, row in enumerate(self.rows) if not row.request.future.cancelled()]
        if len(keep) < len(self.rows):
            self._select(keep)
            if self.rows:
                self.logits = self.logits[torch.tensor(keep, device=self.logits.device)]

    def _remember(self, index: int, row: _Row) -> None:
        """Keep finished row ``index``'s KV (prompt + all its tokens but the last) under its ``request_id``."""
        if not self.prefix_cache.enabled:
            return
        covered = row.request.prompt_ids + row.token_ids[:-1]
        layers = row_kv(self.cache, self.attention_mask, index)
        if layers and layers[0][0].shape[-2] == len(covered):  # always; a mismatch would only lose the entry
            self.prefix_cache.put(row.request.request_id, CachedPrefix(covered, layers))

    def _prefill_length(self, request: ServerRequest) -> int:
        """Prompt tokens ``request`` needs to prefill (all but those its conversation's cached KV covers)."""
        return len(request.prompt_ids) - self.prefix_cache.peek_usable(request.request_id, request.prompt_ids)

    def _take_admissions(self) -> list[ServerRequest]:
        """Waiting requests that fit the free slots and the prefill token budget (FIFO; at least one)."""
        taken: list[ServerRequest] = []
        longest = 0
        while self.waiting and len(self.rows) + len(taken) < self.max_num_seqs:
            longest_if_taken = max(longest, self._prefill_length(self.waiting[0]))
            if taken and longest_if_taken * (len(taken) + 1) > self.max_prefill_tokens:
                break
            taken.append(self.waiting.popleft())
            longest = longest_if_taken
        return taken

    def _admit(self) -> None:
        """Prefill the admitted requests (fresh ones, then resumed ones) and append them to the running batch."""
        taken = self._take_admissions()
        if not taken:
            return
        fresh, resumed = [], []
        for request in taken:
            prefix, usable = self.prefix_cache.take(request.request_id, request.prompt_ids)
            if prefix is None:
                fresh.append(request)
            else:
                resumed.append((request, prefix, usable))
        try:
            groups = [self._prefill_fresh(fresh)] if fresh else []
            if resumed:
                groups.append(self._prefill_resumed(resumed))
        except BaseException:
            self.waiting.extendleft(reversed(taken))  # still ours: reset() returns them
            raise
        for requests, prefilled in groups:
            self._append(requests, *prefilled)

    def _prefill_fresh(self, requests: list[ServerRequest]):
        """Full prefill of ``requests``' prompts ``[k, P]``: ``(requests, (cache, mask, next_pos, logits))``."""
        from transformers import DynamicCache

        input_ids, mask = left_pad([r.prompt_ids for r in requests], self.rollout.pad_token_id, self.rollout.device)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        logits = prefill_distinct_rows(self.rollout.model, input_ids, mask, position_ids, cache)  # [k, V]
        return requests, (cache, mask, position_ids[:, -1:] + 1, logits)

    def _prefill_resumed(self, resumed: list[tuple[ServerRequest, CachedPrefix, int]]):
        """Prefill only the new suffixes on top of the cached KV (see the module docstring).

        Row ``i`` (prompt length ``n_i``, ``u_i`` cached tokens usable) reuses its first ``p_i = max(0, n_i - S)``
        cached steps and feeds ``prompt[p_i:]`` left-padded to ``S = max(n_i - u_i)`` at positions ``p_i ...``.
        """
        requests = [request for request, _, _ in resumed]
        lengths = [len(r.prompt_ids) for r in requests]
        suffix = max(n - usable for n, (_, _, usable) in zip(lengths, resumed))
        reused = [max(0, n - suffix) for n in lengths]
        cache, past_mask = stack_prefixes([prefix.layers for _, prefix, _ in resumed], reused)  # [k, P]
        device = past_mask.device
        rows = [r.prompt_ids[p:] for r, p in zip(requests, reused)]
        input_ids, new_mask = left_pad(rows, self.rollout.pad_token_id, device)  # [k, S]
        start = torch.tensor(reused, device=device).unsqueeze(-1)  # [k, 1]
        position_ids = start + (new_mask.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([past_mask, new_mask], dim=-1)
        logits = self.rollout.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
            **cache_kwarg(self.rollout.model, cache),
        ).logits[:, -1]
        return requests, (cache, mask, position_ids[:, -1:] + 1, logits)

    def _append(self, requests: list[ServerRequest], cache, mask, next_pos, logits) -> None:
        """Merge prefilled rows (cache, ``mask [k, T]``, ``next_pos [k, 1]``, ``logits [k, V]``) into the batch."""
        if not self.rows:
            self.cache, self.attention_mask, self.next_pos, self.logits = cache, mask, next_pos, logits
        else:
            self.cache, self.attention_mask = merge_rows(self.cache, self.attention_mask, cache, mask)
            self.next_pos = torch.cat([self.next_pos, next_pos])
            self.logits = torch.cat([self.logits, logits])
        self.rows.extend(_Row(request, self._generator(request)) for request in requests)

    def _generator(self, request: ServerRequest) -> torch.Generator | None:
        seed = request.params.seed
        if seed is None or request.params.sampling.greedy:
            return None
        return torch.Generator(device=self.rollout.device).manual_seed(seed)

    def _select(self, keep: list[int]) -> None:
        """Keep rows ``keep`` of the batch, then trim the columns that became padding in every row."""
        self.rows = [self.rows[i] for i in keep]
        if not keep:
            self._clear()
            return
        index = torch.tensor(keep, device=self.attention_mask.device)
        self.cache.batch_select_indices(index)
        self.attention_mask, self.next_pos = self.attention_mask[index], self.next_pos[index]
        lead, _ = all_padding_columns(self.attention_mask)
        self.attention_mask = trim_leading(self.cache, self.attention_mask, lead)

    def _decode(self, tokens: torch.Tensor) -> None:
        """Feed ``tokens [B]`` (the tokens just sampled) and compute the next logits ``[B, V]``."""
        self.attention_mask = torch.cat([self.attention_mask, torch.ones_like(self.attention_mask[:, :1])], dim=-1)
        self.logits = self.rollout.model(
            input_ids=tokens.unsqueeze(-1),
            attention_mask=self.attention_mask,
            position_ids=self.next_pos,
            use_cache=True,
            **cache_kwarg(self.rollout.model, self.cache),
        ).logits[:, -1]
        self.next_pos = self.next_pos + 1
