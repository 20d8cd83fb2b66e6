"""Metrics of the async modes (verl 0.9's names where it has them).

    training/off_policy/trajectory_staleness/{mean,max,min}   this step's batch (verl's name; one batch = one
                                                               version, so the three agree)
    training/off_policy/evicted_samples                       prompts dropped as too stale this step (verl's name)
    training/off_policy_versions/staleness_<s>                batches trained at staleness s since the process
                                                               started (histogram; a resumed run counts anew)
    async/dropped_batches                                     batches dropped since the process started
    async/buffer_size                                         generations in flight while the step trains
    async/trainer_idle_s                                      seconds the driver waited for the step's batch
    async/rollout_idle_s                                      seconds the rollout sat idle before generating
                                                               this batch (worker-side timestamps)
    async/weight_publish_s                                    separate_async: seconds the driver waited for the
                                                               actor to publish its weights (the load is queued)
    async/trainer_version, async/rollout_version              the clock after the step
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AsyncStats", "rollout_idle_seconds"]

PREFIX = "async/"
HISTOGRAM_PREFIX = "training/off_policy_versions/staleness_"


@dataclass
class AsyncStats:
    """Counters kept over the run (from the start or the resume point)."""

    staleness_counts: Counter = field(default_factory=Counter)
    dropped_batches: int = 0
    last_rollout_end: float | None = None  # worker-side end time of the previous generation

    def trained(self, staleness: int) -> dict[str, Any]:
        """Record the step's batch; its staleness metrics and the histogram so far."""
        self.staleness_counts[staleness] += 1
        return {
            "training/off_policy/trajectory_staleness/mean": float(staleness),
            "training/off_policy/trajectory_staleness/max": float(staleness),
            "training/off_policy/trajectory_staleness/min": float(staleness),
            **{f"{HISTOGRAM_PREFIX}{s}": n for s, n in sorted(self.staleness_counts.items())},
        }

    def dropped(self, num_batches: int, num_prompts: int) -> dict[str, Any]:
        self.dropped_batches += num_batches
        return {"training/off_policy/evicted_samples": num_prompts, PREFIX + "dropped_batches": self.dropped_batches}

    def rollout_idle(self, span: tuple[float, float] | None) -> dict[str, float]:
        """``async/rollout_idle_s`` from a generation's worker-side ``(start, end)``; {} without timestamps."""
        if span is None:
            return {}
        idle = rollout_idle_seconds(self.last_rollout_end, span)
        self.last_rollout_end = span[1]
        return {} if idle is None else {PREFIX + "rollout_idle_s": idle}


def rollout_idle_seconds(previous_end: float | None, span: tuple[float, float]) -> float | None:
    """Gap between the previous generation's end and this one's start (None for the first); never negative."""
    if previous_end is None:
        return None
    return max(0.0, span[0] - previous_end)
