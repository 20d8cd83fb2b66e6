"""RayDAPOTrainer: the PPO trainer with DAPO's dynamic sampling as its batch collector.

    fit ──► _train_step ──► DynamicSamplingCollector.collect ──► rollout: generate ─► reward ─► DynamicSampler.add
                  ▲                                                                                  │
                  └──────── (None, {}): fit fetches the next generation batch ◄──────────────────────┤ < T prompts kept
                            old_log_prob ─► ... ─► update_actor (PPO's update stage) ◄───────────────┘ T prompts kept

The trainer is :class:`~hybridrl.trainer.ppo.ray_trainer.RayPPOTrainer` given this collector; every stage,
validation and checkpointing are the PPO trainer's. Generation batches hold ``data.gen_batch_size`` prompts
(the dataloader's batch size); a step trains on ``data.train_batch_size`` prompts × ``rollout.n`` responses.
The time and metrics of the generation batches that did not complete a step are carried into the step that
does (``timing_s/gen`` is their sum). Metrics: ``train/num_gen_batches`` (verl's name), the generation batches
this step consumed; ``timing_s/filter_groups``, the time spent filtering.
"""

from __future__ import annotations

import time
from typing import Any

from hybridrl.protocol import DataProto
from hybridrl.recipes.dapo.dynamic_sampling import DynamicSampler
from hybridrl.trainer.ppo.batch_collection import Rollout
from hybridrl.trainer.ppo.ray_trainer import RayPPOTrainer
from hybridrl.trainer.ppo.stages import TIMING_PREFIX, timed
from hybridrl.trainer.ppo.task_runner import TaskRunner

__all__ = ["DAPOTaskRunner", "DynamicSamplingCollector", "RayDAPOTrainer"]


class DynamicSamplingCollector:
    """A batch collector that keeps only prompt groups whose filter metric varies, over as many generation
    batches as it takes (``sampler=None``: one generation batch per step, still counted)."""

    def __init__(self, sampler: DynamicSampler | None) -> None:
        self.sampler = sampler
        self._carried: dict[str, Any] = {}  # the metrics of this step's earlier generation batches

    def collect(self, prompts: DataProto, rollout: Rollout) -> tuple[DataProto | None, dict[str, Any]]:
        if self.sampler is None:
            batch, metrics = rollout(prompts)
            return batch, {**metrics, "train/num_gen_batches": 1}
        start = time.perf_counter()
        # a fresh sampling stream for every generation batch of a step (hf seeds by step + this index)
        scored, metrics = rollout(prompts, gen_batch_index=self.sampler.num_gen_batches)
        metrics = dict(metrics)
        with timed("filter_groups", metrics):  # a budget error then names this stage
            step = self.sampler.add(scored)
        if step is None:
            self._carried = _carry(self._carried, metrics, elapsed=time.perf_counter() - start)
            print(
                f"[dapo] {len(self.sampler.kept_uids)} < data.train_batch_size={self.sampler.train_batch_size} "
                f"prompts kept after {self.sampler.num_gen_batches} generation batches; keep generating",
                flush=True,
            )
            return None, {}
        metrics, self._carried = _with_carried(metrics, self._carried), {}
        # the kept rows come from several batches: balance them again and recount their tokens
        batch, balance_metrics = rollout.rebalance(step.batch)
        return batch, {**metrics, "train/num_gen_batches": step.num_gen_batches, **balance_metrics}


def _carry(carried: dict[str, Any], metrics: dict[str, Any], elapsed: float) -> dict[str, Any]:
    """A partial step's metrics on top of the carried ones: later values win, timings add up, and
    ``timing_s/step`` gets the partial step's elapsed time."""
    merged = {**carried, **{k: v for k, v in metrics.items() if not k.startswith(TIMING_PREFIX)}}
    for name, seconds in [*metrics.items(), (TIMING_PREFIX + "step", elapsed)]:
        if name.startswith(TIMING_PREFIX):
            merged[name] = carried.get(name, 0.0) + seconds
    return merged


def _with_carried(metrics: dict[str, Any], carried: dict[str, Any]) -> dict[str, Any]:
    """The completing batch's metrics win over carried ones; timings add up (the trainer adds its own step time)."""
    merged = {**carried, **metrics}
    for name, seconds in carried.items():
        if name.startswith(TIMING_PREFIX):
            merged[name] = metrics.get(name, 0.0) + seconds
    return merged


class RayDAPOTrainer(RayPPOTrainer):
    """PPO/GRPO trainer with DAPO dynamic sampling when ``algorithm.filter_groups.enable``."""

    def __init__(self, config, *args: Any, **kwargs: Any) -> None:
        filter_groups = config.algorithm.filter_groups
        sampler = None
        if filter_groups.enable:
            sampler = DynamicSampler(
                train_batch_size=config.data.train_batch_size,
                metric=filter_groups.metric,
                max_num_gen_batches=filter_groups.max_num_gen_batches,
            )
        kwargs.setdefault("batch_collector", DynamicSamplingCollector(sampler))
        super().__init__(config, *args, **kwargs)


class DAPOTaskRunner(TaskRunner):
    """TaskRunner that builds :class:`RayDAPOTrainer` (defined here, not in ``__main__``, so Ray imports it)."""

    def trainer_class(self) -> type:
        return RayDAPOTrainer
