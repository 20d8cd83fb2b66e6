"""``rate_limited`` (alias ``limit``): scoring through a rate-limited API (an LLM judge), verl 0.9's three layers.

Settings under ``reward`` (verl's names; add them with ``+reward.<name>=...``): ``max_concurrent`` calls in
flight (default 1), ``max_rpm`` requests and ``max_tpm`` tokens per minute (default unlimited; each request
counts ``estimated_tokens_per_request`` tokens, default 2000), ``timeout`` seconds per call (default 300).
The limiters are class-level: every manager in one process shares them (the first one built sets them).
A call that times out or raises scores 0.0 with ``timeout`` / ``error`` in its extra info (verl's behaviour).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from hybridrl.experimental.reward_loop.reward_manager.base import RewardManagerBase, get_event_loop, score_result
from hybridrl.experimental.reward_loop.reward_manager.registry import register

logger = logging.getLogger(__name__)


class AsyncTokenBucket:
    """Token bucket: refills ``rate_limit`` tokens per second up to ``max_tokens`` (default ``rate_limit``).

    ``acquire(n)`` waits until ``n`` tokens are there and takes them. A request above ``max_tokens`` waits for
    the shortfall once and leaves the bucket negative (so it is paid back before anyone else goes).
    """

    def __init__(self, rate_limit: float, max_tokens: float | None = None) -> None:
        self.rate_limit = rate_limit
        self.max_tokens = max_tokens or rate_limit
        self.tokens = self.max_tokens
        self.last_update: float | None = None
        self.lock = asyncio.Lock()

    def _refill(self) -> None:
        now = get_event_loop().time()
        if self.last_update is None:
            self.last_update = now
        self.tokens = min(self.max_tokens, self.tokens + (now - self.last_update) * self.rate_limit)
        self.last_update = now

    async def acquire(self, num_tokens: float = 1.0) -> None:
        if num_tokens > self.max_tokens:  # oversized: pay the shortfall in time, go negative
            async with self.lock:
                self._refill()
                wait_time = max(num_tokens - self.tokens, 0.0) / self.rate_limit
                self.tokens -= num_tokens
            if wait_time > 0:
                await asyncio.sleep(wait_time)
            return
        while True:
            async with self.lock:
                self._refill()
                if self.tokens >= num_tokens:
                    self.tokens -= num_tokens
                    return
                wait_time = (num_tokens - self.tokens) / self.rate_limit
            await asyncio.sleep(wait_time)


@register("limit")
@register("rate_limited")
class RateLimitedRewardManager(RewardManagerBase):
    """Concurrency (semaphore), then requests/minute and tokens/minute (token buckets), then a timeout."""

    _semaphore: asyncio.Semaphore | None = None
    _max_concurrent: int | None = None
    _rpm_limiter: AsyncTokenBucket | None = None
    _max_rpm: float | None = None
    _tpm_limiter: AsyncTokenBucket | None = None
    _max_tpm: float | None = None
    _estimated_tokens_per_request: int | None = None
    _class_initialized = False
    # verl reads these ``reward.*`` keys with these fallbacks in code; neither verl's YAML nor hybridrl's holds them
    # (a run adds them with ``+reward.<key>=...``), so they live here, once
    UNSET_KEY_FALLBACKS = {"max_concurrent": 1, "estimated_tokens_per_request": 2000, "timeout": 300.0}

    @classmethod
    def init_class(cls, config: Any, tokenizer: Any) -> None:
        rm_cfg = config.get("reward", None) or {}
        if cls._class_initialized:
            incoming = (rm_cfg.get("max_rpm", None), rm_cfg.get("max_tpm", None))
            if incoming != (cls._max_rpm, cls._max_tpm):
                logger.warning(
                    "RateLimitedRewardManager's limiters are shared by the process and already set "
                    "(max_rpm=%s, max_tpm=%s); the new max_rpm=%s, max_tpm=%s are ignored.",
                    cls._max_rpm,
                    cls._max_tpm,
                    *incoming,
                )
            return
        fallback = cls.UNSET_KEY_FALLBACKS
        cls._max_concurrent = rm_cfg.get("max_concurrent", fallback["max_concurrent"])
        cls._semaphore = asyncio.Semaphore(cls._max_concurrent)
        cls._max_rpm = rm_cfg.get("max_rpm", None)
        cls._rpm_limiter = None if cls._max_rpm is None else AsyncTokenBucket(cls._max_rpm / 60.0, cls._max_rpm / 60.0)
        cls._max_tpm = rm_cfg.get("max_tpm", None)
        cls._estimated_tokens_per_request = rm_cfg.get(
            "estimated_tokens_per_request", fallback["estimated_tokens_per_request"]
        )
        cls._tpm_limiter = None if cls._max_tpm is None else AsyncTokenBucket(cls._max_tpm / 60.0, cls._max_tpm / 60.0)
        cls._class_initialized = True

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, **kwargs: Any) -> None:
        if config is None:
            config = {"reward": {}}
        if tokenizer is None:
            raise TypeError("RateLimitedRewardManager requires `tokenizer`.")
        for legacy in ("num_examine", "reward_fn_key"):  # the driver managers' arguments, unused here
            kwargs.pop(legacy, None)
        super().__init__(config, tokenizer, compute_score, **kwargs)
        self.timeout = (config.get("reward", None) or {}).get("timeout", self.UNSET_KEY_FALLBACKS["timeout"])

    async def run_single(self, data: Any) -> dict:
        fields = self.sample_fields(data)
        solution_str = await self.decode(fields.valid_response_ids)
        if self._rpm_limiter is not None:
            await self._rpm_limiter.acquire(1.0)
        if self._tpm_limiter is not None:
            await self._tpm_limiter.acquire(self._estimated_tokens_per_request)
        async with self._semaphore:
            try:
                result = await asyncio.wait_for(
                    self.call_compute_score(**self.score_kwargs(fields, solution_str)), timeout=self.timeout
                )
                return score_result(result)
            except asyncio.TimeoutError:
                logger.warning(
                    "reward computation timed out after %ss (data_source=%s)", self.timeout, fields.data_source
                )
                return {"reward_score": 0.0, "reward_extra_info": {"timeout": True, "acc": 0.0}}
            except Exception as exc:  # noqa: BLE001 - verl's rule: a failing judge scores 0, the step goes on
                logger.error("reward computation failed (data_source=%s): %s", fields.data_source, exc)
                return {"reward_score": 0.0, "reward_extra_info": {"error": str(exc), "acc": 0.0}}
