"""RayOnlineDPOTrainer: online DPO on the PPO trainer's worker groups and single controller.

    driver (RayPPOTrainer.fit with a DPO update stage)             actor_rollout_ref worker group
      │  for each batch of prompts:                                (DPOActorRolloutRefWorker: actor +
      │    generate (rollout.n ≥ 2 per prompt) ──────────────────►   rollout + reference, one process)
      │    reward (reward fn / RM: a score per response)
      │    DPOUpdate (dpo_update.py): pairs ─► ref_log_prob ─────►   compute_ref_log_prob
      │                               DPO update ────────────────►   update_actor_dpo
      │                               every trainer.ref_update_freq steps: reference ← actor ► sync_ref_from_actor
      ▼    validation / checkpoint as PPO

Differences from PPO's step: no old log-probs, values, advantages or critic; the actor learns from pairs.
The trainer is :class:`~hybridrl.trainer.ppo.ray_trainer.RayPPOTrainer` given a
:class:`~hybridrl.recipes.online_dpo.dpo_update.DPOUpdate` (best vs worst response per prompt) and roles
rewritten to one ``actor_rollout_ref`` worker; SPIN (``hybridrl.recipes.spin``) passes its own pair builder.
"""

from __future__ import annotations

from typing import Any

import ray

from hybridrl.recipes.online_dpo.dpo_update import BestWorstPairs, DPOUpdate
from hybridrl.recipes.online_dpo.dpo_worker import DPOActorRolloutRefWorker
from hybridrl.trainer.ppo.ray_trainer import RayPPOTrainer
from hybridrl.trainer.ppo.roles import Role
from hybridrl.trainer.ppo.task_runner import TaskRunner

__all__ = ["OnlineDPOTaskRunner", "RayOnlineDPOTrainer", "dpo_role_mapping"]


def dpo_role_mapping(role_worker_mapping: dict, mapping: dict, worker_cls: type) -> dict:
    """Replace the policy roles by one ``actor_rollout_ref`` worker of ``worker_cls`` (the reference lives in the
    actor's process so ``sync_ref_from_actor`` can copy shards locally). ``mapping`` (role → pool) is updated in
    place; returns the new role → Ray class mapping."""
    if Role.Critic in role_worker_mapping:
        raise ValueError("DPO recipes train no critic: set critic.enable=False (or a critic-free adv_estimator).")
    pool = mapping.get(Role.ActorRolloutRef) or mapping.get(Role.ActorRollout)
    if pool is None:
        raise ValueError("role_worker_mapping needs Role.ActorRollout or Role.ActorRolloutRef")
    policy_roles = (Role.ActorRollout, Role.ActorRolloutRef, Role.RefPolicy)
    workers = {role: cls for role, cls in role_worker_mapping.items() if role not in policy_roles}
    for role in policy_roles:
        mapping.pop(role, None)
    workers[Role.ActorRolloutRef] = ray.remote(worker_cls)
    mapping[Role.ActorRolloutRef] = pool
    return workers


class RayOnlineDPOTrainer(RayPPOTrainer):
    """Online DPO (Guo et al. 2024, arXiv 2402.04792) with a reward function or model as the annotator.

    ``update_stage`` defaults to :class:`DPOUpdate` with :class:`BestWorstPairs`; SPIN passes its own.
    """

    worker_class: type = DPOActorRolloutRefWorker

    def __init__(self, config, tokenizer, role_worker_mapping, resource_pool_manager, **kwargs: Any) -> None:
        role_worker_mapping = dpo_role_mapping(role_worker_mapping, resource_pool_manager.mapping, self.worker_class)
        kwargs.setdefault("update_stage", DPOUpdate.from_config(config, BestWorstPairs()))
        super().__init__(config, tokenizer, role_worker_mapping, resource_pool_manager, **kwargs)


class OnlineDPOTaskRunner(TaskRunner):
    """The PPO TaskRunner building :class:`RayOnlineDPOTrainer` (its roles are rewritten by the trainer)."""

    def trainer_class(self) -> type:
        return RayOnlineDPOTrainer
