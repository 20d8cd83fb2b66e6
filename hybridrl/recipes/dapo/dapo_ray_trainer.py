"""RayDAPOTrainer: the PPO trainer whose rollout stage is DAPO's dynamic sampling.

    fit (unchanged) ──► _train_step ──► _rollout ──► generate ─► reward ─► DynamicSampler.add
                              ▲                                               │
                              └──────── None: fit fetches the next ◄──────────┤ fewer than T prompts kept
                                        generation batch                      │
                                        old_log_prob ─► ... ─► update_actor ◄─┘ T prompts kept (step batch)

Only ``_rollout`` is overridden; every other stage, validation and checkpointing are the PPO trainer's.
Generation batches hold ``data.gen_batch_size`` prompts (the dataloader's batch size); a step trains on
``data.train_batch_size`` prompts × ``rollout.n`` responses. The time and metrics of the generation batches
that did not complete a step are carried into the step that does (``timing_s/gen`` is their sum).
Metrics: ``train/num_gen_batches`` (verl's name), the generation batches this step consumed;
``timing_s/filter_groups``, the time spent filtering.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from hybridrl.protocol import DataProto
from hybridrl.recipes.dapo.dynamic_sampling import DynamicSampler
from hybridrl.trainer.ppo.ray_trainer import RayPPOTrainer
from hybridrl.trainer.ppo.task_runner import TaskRunner

__all__ = ["DAPOTaskRunner", "RayDAPOTrainer"]


class RayDAPOTrainer(RayPPOTrainer):
    """PPO/GRPO trainer with DAPO dynamic sampling when ``algorithm.filter_groups.enable``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        filter_groups = self.config.algorithm.filter_groups
        self.sampler: DynamicSampler | None = None
        if filter_groups.enable:
            self.sampler = DynamicSampler(
                train_batch_size=self.config.data.train_batch_size,
                metric=filter_groups.metric,
                max_num_gen_batches=filter_groups.max_num_gen_batches,
            )
        self._carried_metrics: dict[str, Any] = {}
        self._carried_timing: dict[str, float] = {}

    def _gen_batch_index(self) -> int:
        # a fresh sampling stream for every generation batch of a step (hf seeds by step + this index)
        return self.sampler.num_gen_batches if self.sampler is not None else 0

    def _rollout(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto | None:
        """generate → reward → filter groups; None until ``data.train_batch_size`` prompts are kept."""
        if self.sampler is None:
            metrics["train/num_gen_batches"] = 1
            return super()._rollout(batch, metrics, timing_raw)
        start = time.perf_counter()
        scored = super()._rollout(batch, metrics, timing_raw)
        assert scored is not None, "the PPO rollout stage always returns a batch"
        with self._timed("filter_groups", timing_raw):  # a budget error then names this stage
            step = self.sampler.add(scored)
        if step is None:
            self._carry(metrics, timing_raw, elapsed=time.perf_counter() - start)
            print(
                f"[dapo] {len(self.sampler.kept_uids)} < data.train_batch_size={self.config.data.train_batch_size} "
                f"prompts kept after {self.sampler.num_gen_batches} generation batches; keep generating",
                flush=True,
            )
            return None
        self._restore_carried(metrics, timing_raw)
        metrics["train/num_gen_batches"] = step.num_gen_batches
        batch = step.batch
        assert batch.batch is not None, "a scored batch has tensors"
        if self.config.trainer.balance_batch:  # the kept rows come from several batches: balance them again
            self._balance_batch(batch, metrics)
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
        return batch

    def _carry(self, metrics: dict, timing_raw: dict, elapsed: float) -> None:
        """Keep a partial step's metrics (later ones win) and timings (summed; ``step`` gets the elapsed time)."""
        self._carried_metrics.update(metrics)
        for name, seconds in timing_raw.items():
            self._carried_timing[name] = self._carried_timing.get(name, 0.0) + seconds
        self._carried_timing["step"] = self._carried_timing.get("step", 0.0) + elapsed

    def _restore_carried(self, metrics: dict, timing_raw: dict) -> None:
        for name, value in self._carried_metrics.items():
            metrics.setdefault(name, value)
        for name, seconds in self._carried_timing.items():
            timing_raw[name] = timing_raw.get(name, 0.0) + seconds  # the outer "step" timer adds its own time
        self._carried_metrics, self._carried_timing = {}, {}


class DAPOTaskRunner(TaskRunner):
    """TaskRunner that builds :class:`RayDAPOTrainer` (defined here, not in ``__main__``, so Ray imports it)."""

    def trainer_class(self) -> type:
        return RayDAPOTrainer
