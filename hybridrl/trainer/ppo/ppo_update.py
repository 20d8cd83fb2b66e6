"""The update stage: what a step does with its scored batch (a trainer part), and PPO's.

    scored batch ─► old_log_prob ─► ref_log_prob ─► teacher_log_prob ─► values ─► advantage ─► update_critic ─┬─►
                    (actor)         (ref, if any)   (teachers, if any)  (critic)   (driver)     update_actor ──┘
                                                                            (after trainer.critic_warmup steps;
                                                                             beside the critic under split placement)

A recipe passes its own (``RayPPOTrainer(..., update_stage=...)``): online DPO and SPIN build preference
pairs and run a DPO update instead (``hybridrl.recipes.online_dpo.dpo_update``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from hybridrl.algos.kl import KLController
from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo import stages
from hybridrl.trainer.ppo.metric_utils import compute_data_metrics
from hybridrl.trainer.ppo.stages import StepSettings
from hybridrl.trainer.ppo.worker_groups import WorkerGroups

__all__ = ["PPOUpdate", "UpdateStage", "update_models"]


class UpdateStage(Protocol):
    """From the step's scored batch to updated models."""

    def run(self, batch: DataProto, workers: WorkerGroups, global_steps: int) -> tuple[DataProto, dict[str, Any]]:
        """Update the models; return the batch the step's data metrics describe, and the stages' metrics."""
        ...

    def data_metrics(self, batch: DataProto, workers: WorkerGroups) -> dict[str, Any]:
        """The step's data metrics (``critic/score/*``, ``response_length/*``, ...) of the returned batch."""
        ...

    def after_resume(self, workers: WorkerGroups, global_steps: int) -> None:
        """Called once the workers restored a checkpoint of step ``global_steps`` (0: none)."""
        ...


@dataclass(frozen=True)
class PPOUpdate:
    """PPO/GRPO's update stage (verl's step order).

    Args:
        settings: the config values the stages read.
        kl_ctrl: the in-reward KL controller (``algorithm.use_kl_in_reward``), adapted every step; the trainer
            checkpoints its value.
        critic_warmup: ``trainer.critic_warmup``: the actor is updated once ``critic_warmup <= global_steps``.
        overlap_updates: the critic has a resource pool of its own, so the two updates may run at once.
    """

    settings: StepSettings
    kl_ctrl: KLController | None
    critic_warmup: int
    overlap_updates: bool

    def run(self, batch: DataProto, workers: WorkerGroups, global_steps: int) -> tuple[DataProto, dict[str, Any]]:
        batch, metrics = stages.old_log_prob(batch, workers.actor_rollout, self.settings)
        if workers.ref is not None:
            batch, ref_metrics = stages.ref_log_prob(batch, workers.ref)
            metrics = {**metrics, **ref_metrics}
        if workers.teachers is not None:  # on-policy distillation: + teacher_logprobs
            batch, teacher_metrics = workers.teachers.score(batch)
            metrics = {**metrics, **teacher_metrics}
        if workers.critic is not None:
            batch, value_metrics = stages.values(batch, workers.critic)
            metrics = {**metrics, **value_metrics}
        batch, adv_metrics = stages.advantage(batch, self.settings, self.kl_ctrl, global_steps)
        update_actor = self.critic_warmup <= global_steps
        batch, update_metrics = update_models(batch, workers, self.settings, update_actor, self.overlap_updates)
        return batch, {**metrics, **adv_metrics, **update_metrics}

    def data_metrics(self, batch: DataProto, workers: WorkerGroups) -> dict[str, Any]:
        return compute_data_metrics(batch=batch, use_critic=workers.use_critic)

    def after_resume(self, workers: WorkerGroups, global_steps: int) -> None:
        return None


def update_models(
    batch: DataProto, workers: WorkerGroups, settings: StepSettings, update_actor: bool, overlap: bool
) -> tuple[DataProto, dict[str, Any]]:
    """Critic update (when there is a critic), then the actor's (when ``update_actor``).

    With ``overlap`` (the critic on a resource pool of its own) the two updates use disjoint workers and need
    nothing from each other, so they run at the same time (verl's split-placement example does the same with
    a non-blocking critic call).
    """
    if not (workers.critic is not None and update_actor and overlap):
        metrics: dict[str, Any] = {}
        if workers.critic is not None:
            batch, metrics = stages.update_critic(batch, workers.critic)
        if update_actor:
            batch, actor_metrics = stages.update_actor(batch, workers.actor_rollout, settings)
            metrics = {**metrics, **actor_metrics}
        return batch, metrics
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="update_critic") as executor:
        critic_update = executor.submit(stages.update_critic, batch, workers.critic)
        batch, actor_metrics = stages.update_actor(batch, workers.actor_rollout, settings)
        _, critic_metrics = critic_update.result()  # re-raises the critic's failure
    return batch, {**actor_metrics, **critic_metrics}
