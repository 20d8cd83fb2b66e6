"""Scoring that never crashes a step: a failing, hanging or nonsense ``compute_score`` gets the fallback score.

Every sample's outcome is one of ``ok``, ``error`` (raised, or returned None / NaN / no number) or ``timeout``
(no result after ``compute_score_timeout`` seconds). The per-sample flags travel as the extra-info keys
:data:`JUDGE_ERROR_KEY` / :data:`JUDGE_TIMEOUT_KEY`; :func:`judge_metrics` counts them for the step's metrics
``reward/judge_errors`` and ``reward/judge_timeouts``.

Settings (``reward.reward_kwargs``, or ``reward_model.reward_kwargs`` as hybridrl spells it):
``compute_score_timeout`` (seconds; None: no limit) and ``fallback_score`` (default 0.0, verl's score for a
failed call). A timed-out plain function keeps running in its thread (a thread cannot be killed); its result
is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

JUDGE_ERROR_KEY = "judge_error"
JUDGE_TIMEOUT_KEY = "judge_timeout"
JUDGE_METRICS = {JUDGE_ERROR_KEY: "reward/judge_errors", JUDGE_TIMEOUT_KEY: "reward/judge_timeouts"}


@dataclass(frozen=True)
class ScoringPolicy:
    """What a failed sample scores and how long a call may take."""

    fallback_score: float = 0.0
    timeout_s: float | None = None

    @classmethod
    def from_config(cls, config: Any) -> ScoringPolicy:
        for section in ("reward", "reward_model"):
            kwargs = (config.get(section, None) or {}).get("reward_kwargs", None) or {}
            if "compute_score_timeout" in kwargs or "fallback_score" in kwargs:
                return cls(
                    fallback_score=float(kwargs.get("fallback_score", 0.0)),
                    timeout_s=kwargs.get("compute_score_timeout", None) or None,
                )
        return cls()


def finite_score(value: Any) -> float | None:
    """``value`` as a finite float, or None (None, NaN, inf, a string, a multi-element tensor)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    elif isinstance(value, (np.ndarray, np.generic)) and value.size == 1:
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _failed(policy: ScoringPolicy, flag: str, reason: str) -> dict:
    return {
        "reward_score": policy.fallback_score,
        "reward_extra_info": {
            "acc": policy.fallback_score,
            JUDGE_ERROR_KEY: flag == JUDGE_ERROR_KEY,
            JUDGE_TIMEOUT_KEY: flag == JUDGE_TIMEOUT_KEY,
        },
        "judge_failure": reason,
    }


async def guarded(run: Awaitable[dict], policy: ScoringPolicy, where: str) -> dict:
    """Await a manager's ``run_single``; on a raise, a timeout or a non-finite score give the fallback."""
    try:
        out = await asyncio.wait_for(run, timeout=policy.timeout_s)
    except asyncio.TimeoutError:
        logger.warning("reward for %s: no result after %ss; scored %s", where, policy.timeout_s, policy.fallback_score)
        return _failed(policy, JUDGE_TIMEOUT_KEY, f"timeout after {policy.timeout_s}s")
    except Exception as exc:  # noqa: BLE001 - any failure of user code becomes the fallback, counted
        logger.warning(
            "reward for %s failed (%s: %s); scored %s", where, type(exc).__name__, exc, policy.fallback_score
        )
        return _failed(policy, JUDGE_ERROR_KEY, f"{type(exc).__name__}: {exc}")
    score = finite_score(out.get("reward_score", None)) if isinstance(out, dict) else None
    if score is None:
        shown = out.get("reward_score", None) if isinstance(out, dict) else out
        logger.warning("reward for %s: no usable score (%r); scored %s", where, shown, policy.fallback_score)
        return _failed(policy, JUDGE_ERROR_KEY, f"no usable score: {shown!r}")
    extra = dict(out.get("reward_extra_info", None) or {})
    extra.setdefault(JUDGE_ERROR_KEY, False)
    extra.setdefault(JUDGE_TIMEOUT_KEY, bool(extra.get("timeout", False)))
    if "error" in extra:  # the rate-limited manager's own catch: count it too
        extra[JUDGE_ERROR_KEY] = True
    return {**out, "reward_score": score, "reward_extra_info": extra}


def judge_metrics(reward_extra_info: dict) -> dict[str, float]:
    """Pop the per-sample judge flags of a step's extra info; their counts under ``reward/judge_*``."""
    metrics = {}
    for key, name in JUDGE_METRICS.items():
        flags = reward_extra_info.pop(key, None)
        if flags is not None:
            metrics[name] = float(sum(bool(flag) for flag in flags))
    return metrics
