"""RayOnlineDPOTrainer: online DPO on the PPO trainer's worker groups and single controller.

    driver (this class)                                            actor_rollout_ref worker group
      │  for each batch of prompts:                                (DPOActorRolloutRefWorker: actor +
      │    generate (rollout.n ≥ 2 per prompt) ──────────────────►   rollout + reference, one process)
      │    reward (reward fn / RM: a score per response)
      │    pairs: best vs worst response per prompt, ties skipped   (driver; ``_make_pairs``)
      │          rows (chosen, rejected, …), padded with weight-0 pairs to a multiple of the world size
      │    ref_log_prob of the pair rows ────────────────────────►   compute_ref_log_prob
      │    DPO update ───────────────────────────────────────────►   update_actor_dpo
      │    every trainer.ref_update_freq steps: reference ← actor ►   sync_ref_from_actor
      ▼    validation / checkpoint as PPO

Differences from PPO's step: no old log-probs, values, advantages or critic; the actor learns from pairs.
SPIN (``hybridrl.recipes.spin``) overrides only ``_make_pairs``. Pair metrics: ``dpo/num_pairs`` (real
pairs), ``dpo/pair_ratio`` (pairs per prompt), ``dpo/chosen_score/mean``, ``dpo/rejected_score/mean``;
the update adds ``actor/dpo_loss``, ``actor/rewards_{chosen,rejected}``, ``actor/reward_{accuracy,margin}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import ray
import torch

from hybridrl.protocol import DataProto
from hybridrl.recipes.online_dpo.dpo_actor import DPOHyperParams
from hybridrl.recipes.online_dpo.dpo_worker import DPOActorRolloutRefWorker
from hybridrl.recipes.online_dpo.pairs import build_pair_batch, select_best_worst_pairs
from hybridrl.trainer.ppo.metric_utils import compute_data_metrics, compute_throughout_metrics, compute_timing_metrics
from hybridrl.trainer.ppo.ray_trainer import RayPPOTrainer
from hybridrl.trainer.ppo.roles import Role
from hybridrl.trainer.ppo.task_runner import TaskRunner
from hybridrl.utils.metric import reduce_metrics

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
    """Online DPO (Guo et al. 2024, arXiv 2402.04792) with a reward function or model as the annotator."""

    worker_class: type = DPOActorRolloutRefWorker

    def __init__(self, config, tokenizer, role_worker_mapping, resource_pool_manager, **kwargs: Any) -> None:
        role_worker_mapping = dpo_role_mapping(role_worker_mapping, resource_pool_manager.mapping, self.worker_class)
        super().__init__(config, tokenizer, role_worker_mapping, resource_pool_manager, **kwargs)
        dpo = config.algorithm.dpo
        self.dpo_hyper = DPOHyperParams(float(dpo.beta), str(dpo.loss_type), float(dpo.label_smoothing))

    # ------------------------------------------------------------------ one step
    def _run_step(self, batch_dict: dict, epoch: int) -> dict[str, float] | None:
        """generate → reward → pairs → ref log-probs → DPO update (→ reference refresh) → validate/save."""
        trainer_cfg = self.config.trainer
        is_last_step = self.global_steps >= self.total_training_steps
        metrics: dict[str, Any] = {}
        timing_raw: dict[str, float] = {}
        with self._timed("step", timing_raw):
            batch = self._rollout(DataProto.from_single_dict(batch_dict), metrics, timing_raw)
            if batch is None:
                return None
            pairs = self._make_pairs(batch, metrics)
            if pairs is not None:
                pairs = self._compute_ref_log_prob(pairs, timing_raw)
                self._update_actor_dpo(pairs, metrics, timing_raw)
            self._maybe_sync_reference(timing_raw)
            self._maybe_dump_rollout(batch)
            if self._due(trainer_cfg.test_freq, is_last_step) and self.val_reward_fn is not None:
                with self._timed("testing", timing_raw):
                    metrics.update(self._validate())
            if self._due(trainer_cfg.save_freq, is_last_step):
                with self._timed("save_checkpoint", timing_raw):
                    self._save_checkpoint()
        metrics.update({"training/global_step": self.global_steps, "training/epoch": epoch})
        metrics.update(_score_and_length_metrics(batch))
        metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
        n_gpus = self.resource_pool_manager.get_n_gpus()
        metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus))
        return metrics

    # ------------------------------------------------------------------ stages
    def _make_pairs(self, batch: DataProto, metrics: dict) -> DataProto | None:
        """Best vs worst response of each prompt (by summed ``token_level_scores``); ties skipped."""
        scores = batch.batch["token_level_scores"].sum(-1)
        pairs = select_best_worst_pairs(list(batch.non_tensor_batch["uid"]), scores)
        num_prompts = len(set(batch.non_tensor_batch["uid"]))
        metrics.update(_pair_metrics(pairs, scores, num_prompts))
        if not pairs:
            print(f"[online_dpo] step {self.global_steps}: every prompt's responses tie; no DPO update", flush=True)
        return build_pair_batch(batch, pairs, self.actor_rollout_wg.world_size)

    def _update_actor_dpo(self, pairs: DataProto, metrics: dict, timing_raw: dict) -> None:
        pairs.meta_info.update(self.dpo_hyper.as_meta(), temperature=self.config.actor_rollout_ref.rollout.temperature)
        with self._timed("update_actor", timing_raw):
            output = self.actor_rollout_wg.update_actor_dpo(pairs)
        metrics.update(reduce_metrics(output.meta_info["metrics"]))

    def _maybe_sync_reference(self, timing_raw: dict) -> None:
        """SPIN's iteration boundary: every ``trainer.ref_update_freq`` steps the reference becomes the actor."""
        freq = int(self.config.trainer.get("ref_update_freq", -1) or -1)
        if freq > 0 and self.global_steps % freq == 0:
            with self._timed("update_ref", timing_raw):
                self.actor_rollout_wg.sync_ref_from_actor()

    def _load_checkpoint(self) -> int:
        """Resume; with ``ref_update_freq`` the reference is re-synced from the restored actor, which is exact
        when the checkpoint step is a multiple of ``ref_update_freq`` (the reference was synced right then)."""
        global_steps = super()._load_checkpoint()
        freq = int(self.config.trainer.get("ref_update_freq", -1) or -1)
        if global_steps > 0 and freq > 0:
            if global_steps % freq:
                print(
                    f"[online_dpo] resuming at step {global_steps}, not a multiple of trainer.ref_update_freq="
                    f"{freq}: the reference restarts from the restored actor",
                    flush=True,
                )
            self.actor_rollout_wg.sync_ref_from_actor()
        return global_steps


def _pair_metrics(pairs: list[tuple[int, int]], scores: torch.Tensor, num_prompts: int) -> dict[str, float]:
    metrics = {"dpo/num_pairs": float(len(pairs)), "dpo/pair_ratio": len(pairs) / max(num_prompts, 1)}
    if pairs:
        chosen, rejected = (torch.tensor(rows) for rows in zip(*pairs))
        metrics["dpo/chosen_score/mean"] = scores[chosen].float().mean().item()
        metrics["dpo/rejected_score/mean"] = scores[rejected].float().mean().item()
    return metrics


def _score_and_length_metrics(batch: DataProto) -> dict[str, float]:
    """PPO's data metrics that mean something without advantages: ``critic/score/*``, ``critic/rewards/*``
    (the same: no KL in the reward), ``response_length/*``, ``prompt_length/*``."""
    tensors = batch.batch
    zeros = torch.zeros_like(tensors["token_level_scores"])
    view = DataProto.from_dict(
        tensors={
            **{k: tensors[k] for k in ("responses", "attention_mask", "response_mask", "token_level_scores")},
            "token_level_rewards": tensors["token_level_scores"],
            "advantages": zeros,
            "returns": zeros,
        },
        non_tensors={
            k: np.asarray(v) for k, v in batch.non_tensor_batch.items() if k in ("__num_turns__", "tool_call_counts")
        },
    )
    metrics = compute_data_metrics(batch=view, use_critic=False)
    return {k: v for k, v in metrics.items() if not k.startswith(("critic/advantages", "critic/returns"))}


class OnlineDPOTaskRunner(TaskRunner):
    """The PPO TaskRunner building :class:`RayOnlineDPOTrainer` (its roles are rewritten by the trainer)."""

    def trainer_class(self) -> type:
        return RayOnlineDPOTrainer
