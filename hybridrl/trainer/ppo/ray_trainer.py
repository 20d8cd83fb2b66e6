"""RayPPOTrainer: the single controller that runs PPO / GRPO and their variants.

    driver (this class, inside the TaskRunner Ray actor)
      │  for each batch of prompts:
      │    generate ──► reward ──► old_log_prob ──► ref_log_prob ──► values ──► advantage ──► update_critic ──► update_actor
      │       │           │            │                 │              │        (driver)          │               │
      ▼       ▼           ▼            ▼                 ▼              ▼                          ▼               ▼
    actor_rollout_wg   reward fn   actor_rollout_wg   ref_policy_wg   critic_wg                 critic_wg   actor_rollout_wg
    (hybrid engine:    (+ rm_wg)                     (or the actor                                          (weights then
     sync → generate)                                 with LoRA off)                                         resynced lazily)

Every arrow is a DataProto handed to a worker group method (Dispatch.DP_COMPUTE_PROTO: split across the
data-parallel ranks, results concatenated). Light work (advantages, KL-in-reward, metrics, batch balancing)
runs here; the driver never holds model weights. With the critic on a pool of its own (split placement,
``critic.enable_resource_pool``) update_critic and update_actor run at the same time. The stages live in ``stages.py``, validation in
``validation.py``, checkpoint/resume in ``checkpointing.py``; ``fit`` reads like the picture above.
"""

from __future__ import annotations

import itertools
import json
import os
import warnings
from typing import Any

from omegaconf import OmegaConf

from hybridrl.protocol import DataProto
from hybridrl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup, create_colocated_worker_cls
from hybridrl.trainer.ppo.checkpointing import CheckpointMixin
from hybridrl.trainer.ppo.core_algos import AdvantageEstimator, get_kl_controller
from hybridrl.trainer.ppo.driver_helpers import apply_kl_penalty, compute_advantage, compute_response_mask
from hybridrl.trainer.ppo.metric_utils import compute_data_metrics, compute_throughout_metrics, compute_timing_metrics
from hybridrl.trainer.ppo.roles import ResourcePoolManager, Role, need_critic
from hybridrl.trainer.ppo.stages import StageError, StagesMixin
from hybridrl.trainer.ppo.validation import ValidationMixin
from hybridrl.utils.config import compute_batch_plan, format_batch_plan
from hybridrl.utils.config.defaults import with_defaults
from hybridrl.utils.progress import StepProgress
from hybridrl.utils.timer import simple_timer
from hybridrl.utils.tracking import Tracking, ValidationGenerationsLogger

__all__ = [
    "AdvantageEstimator", "RayPPOTrainer", "ResourcePoolManager", "Role",
    "apply_kl_penalty", "compute_advantage", "compute_response_mask",
]

WorkerType = type


class RayPPOTrainer(StagesMixin, ValidationMixin, CheckpointMixin):
    """PPO/GRPO on Ray worker groups with verl 0.5's constructor, step order, metrics and checkpoints."""

    def __init__(self, config, tokenizer, role_worker_mapping: dict[Role, WorkerType],
                 resource_pool_manager: ResourcePoolManager, ray_worker_group_cls=RayWorkerGroup,
                 processor=None, reward_fn=None, val_reward_fn=None, train_dataset=None, val_dataset=None,
                 collate_fn=None, train_sampler=None, device_name: str | None = None):
        self.config = with_defaults(config)  # a config that predates a key gets the YAML's value
        self.tokenizer = tokenizer
        self.processor = processor
        self.reward_fn = reward_fn
        self.val_reward_fn = val_reward_fn
        if not config.actor_rollout_ref.hybrid_engine:
            raise ValueError("actor_rollout_ref.hybrid_engine=False is not supported: hybridrl runs the hybrid engine")
        if Role.ActorRollout not in role_worker_mapping and Role.ActorRolloutRef not in role_worker_mapping:
            raise ValueError("role_worker_mapping needs Role.ActorRollout or Role.ActorRolloutRef")
        self.role_worker_mapping = role_worker_mapping
        self.resource_pool_manager = resource_pool_manager
        self.ray_worker_group_cls = ray_worker_group_cls
        self.device_name = device_name or config.trainer.device
        self.use_reference_policy = Role.RefPolicy in role_worker_mapping or Role.ActorRolloutRef in role_worker_mapping
        self.use_rm = Role.RewardModel in role_worker_mapping
        self.use_critic = need_critic(config)
        self.ref_in_actor = config.actor_rollout_ref.model.lora_rank > 0
        use_kl_in_reward = config.algorithm.use_kl_in_reward
        self.kl_ctrl_in_reward = get_kl_controller(config.algorithm.kl_ctrl) if use_kl_in_reward else None
        if config.algorithm.get("filter_groups", {}).get("enable") and type(self)._rollout is StagesMixin._rollout:
            warnings.warn("algorithm.filter_groups.enable=True is ignored by main_ppo's trainer; DAPO dynamic "
                          "sampling runs with: python -m hybridrl.recipes.dapo.main_dapo", stacklevel=2)
        self.global_steps = 0
        self.logger: Tracking | None = None
        self.validation_generations_logger = ValidationGenerationsLogger()
        self._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)

    # ------------------------------------------------------------------ set-up
    def _create_dataloader(self, train_dataset, val_dataset, collate_fn, train_sampler) -> None:
        from torchdata.stateful_dataloader import StatefulDataLoader

        data = self.config.data
        num_workers = data.dataloader_num_workers
        batch_size = data.get("gen_batch_size") or data.train_batch_size
        self.train_dataloader = StatefulDataLoader(
            dataset=train_dataset, batch_size=batch_size, num_workers=num_workers, drop_last=True,
            collate_fn=collate_fn, sampler=train_sampler,
        )
        val_batch_size = data.get("val_batch_size") or len(val_dataset)
        self.val_dataloader = StatefulDataLoader(
            dataset=val_dataset, batch_size=val_batch_size, num_workers=num_workers,
            shuffle=data.validation_shuffle, drop_last=False, collate_fn=collate_fn,
        )
        if len(self.train_dataloader) < 1:
            raise ValueError(
                f"data.train_files has {len(train_dataset)} prompts, fewer than data.train_batch_size={batch_size}: "
                "lower data.train_batch_size or add data"
            )
        self.batch_plan = compute_batch_plan(self.config, len(train_dataset))  # once; each worker gets its part
        self.total_training_steps = self.batch_plan.total_steps
        print(format_batch_plan(self.batch_plan), flush=True)

    def init_workers(self) -> None:
        """Create one colocated worker group per resource pool, then ``init_model`` (actor last, as verl)."""
        self.resource_pool_manager.create_resource_pool()
        class_dicts: dict[Any, dict[str, RayClassWithInitArgs]] = {}

        def add(key: Role, **init_kwargs: Any) -> None:
            pool = self.resource_pool_manager.get_resource_pool(key)
            cls = RayClassWithInitArgs(cls=self.role_worker_mapping[key], **init_kwargs)
            class_dicts.setdefault(pool, {})[str(key)] = cls

        actor_role = Role.ActorRolloutRef if Role.ActorRolloutRef in self.role_worker_mapping else Role.ActorRollout
        policy_plan = self.batch_plan.policy_worker_plan()
        add(actor_role, config=self.config.actor_rollout_ref, role=str(actor_role), plan=policy_plan)
        if self.use_critic:
            add(Role.Critic, config=self.config.critic, plan=self.batch_plan.critic_worker_plan())
        if self.use_reference_policy and not self.ref_in_actor and actor_role != Role.ActorRolloutRef:
            add(Role.RefPolicy, config=self.config.actor_rollout_ref, role="ref", plan=policy_plan)
        if self.use_rm:
            add(Role.RewardModel, config=self.config.reward_model, plan=self.batch_plan.reward_model)

        all_wg: dict[str, Any] = {}
        pools = getattr(self.resource_pool_manager, "resource_pool_dict", {})
        pool_names = {id(pool): name for name, pool in pools.items()}
        for pool, class_dict in class_dicts.items():
            worker_dict_cls = create_colocated_worker_cls(class_dict=class_dict)
            wg_dict = self.ray_worker_group_cls(resource_pool=pool, ray_cls_with_init=worker_dict_cls,
                                                device_name=self.device_name)
            all_wg.update(wg_dict.spawn(prefix_set=class_dict.keys()))
            print(f"[trainer] {pool_names.get(id(pool), 'pool')}: {', '.join(class_dict)} on "
                  f"{wg_dict.world_size} rank(s)", flush=True)

        if self.use_critic:
            self.critic_wg = all_wg[str(Role.Critic)]
            self.critic_wg.init_model()
        if self.use_reference_policy and not self.ref_in_actor and actor_role != Role.ActorRolloutRef:
            self.ref_policy_wg = all_wg[str(Role.RefPolicy)]
            self.ref_policy_wg.init_model()
        elif self.use_reference_policy:
            self.ref_policy_wg = all_wg[str(actor_role)]
        if self.use_rm:
            self.rm_wg = all_wg[str(Role.RewardModel)]
            self.rm_wg.init_model()
        self.actor_rollout_wg = all_wg[str(actor_role)]
        self.actor_rollout_wg.init_model()

    # ------------------------------------------------------------------ the loop
    def fit(self) -> dict[str, float]:
        """Train until ``total_training_steps``; returns the last validation metrics (possibly empty)."""
        trainer_cfg = self.config.trainer
        self.logger = Tracking(
            project_name=trainer_cfg.project_name, experiment_name=trainer_cfg.experiment_name,
            default_backend=list(trainer_cfg.logger), config=OmegaConf.to_container(self.config, resolve=True),
        )
        self.global_steps = self._load_checkpoint()
        if self.global_steps >= self.total_training_steps:
            print(f"[trainer] run already finished: checkpoint at step {self.global_steps} of "
                  f"{self.total_training_steps}; nothing to do", flush=True)
            self.logger.finish()
            return {}
        val_metrics: dict[str, float] = {}
        if self.val_reward_fn is not None and trainer_cfg.val_before_train:
            val_metrics = self._validate()
            print(f"[validation] initial: {json.dumps(val_metrics)}", flush=True)
            self.logger.log(data=val_metrics, step=self.global_steps)
            if trainer_cfg.val_only:
                self.logger.finish()
                return val_metrics
        progress = StepProgress(self.total_training_steps, start_step=self.global_steps)
        steps_per_epoch = len(self.train_dataloader)
        self.global_steps += 1
        for _ in itertools.count():  # passes over the data; a resumed, exhausted epoch yields no batch and moves on
            for batch_dict in self.train_dataloader:
                metrics = self._train_step(batch_dict, epoch=(self.global_steps - 1) // steps_per_epoch)
                if metrics is None:  # a recipe is still collecting this step's batch (DAPO dynamic sampling)
                    continue
                val_metrics = {k: v for k, v in metrics.items() if k.startswith("val-")} or val_metrics
                self.logger.log(data=metrics, step=self.global_steps)
                progress.update(self.global_steps, {k: metrics[k] for k in ("critic/score/mean",) if k in metrics})
                if self.global_steps >= self.total_training_steps:
                    print(f"[trainer] done. final validation: {json.dumps(val_metrics)}", flush=True)
                    self.logger.finish()
                    return val_metrics
                self.global_steps += 1
        raise AssertionError("unreachable")

    def _train_step(self, batch_dict: dict, epoch: int) -> dict[str, float] | None:
        """One PPO step; a failure is re-raised naming the step and the stage it happened in."""
        self._active_stage = "start"
        try:
            return self._run_step(batch_dict, epoch)
        except StageError:
            raise
        except Exception as error:
            raise StageError(
                f"training step {self.global_steps} failed in stage '{self._active_stage}': "
                f"{type(error).__name__}: {error}"
            ) from error

    def _run_step(self, batch_dict: dict, epoch: int) -> dict[str, float] | None:
        """One PPO step in verl's order; returns the step's metrics, or None when ``_rollout`` needs more data."""
        trainer_cfg = self.config.trainer
        is_last_step = self.global_steps >= self.total_training_steps
        metrics: dict[str, float] = {}
        timing_raw: dict[str, float] = {}
        batch = DataProto.from_single_dict(batch_dict)
        with simple_timer("step", timing_raw):  # stage timers inside name the failing stage
            rollout = self._rollout(batch, metrics, timing_raw)
            if rollout is None:
                return None
            batch = self._compute_old_log_prob(rollout, metrics, timing_raw)
            if self.use_reference_policy:
                batch = self._compute_ref_log_prob(batch, timing_raw)
            if self.use_critic:
                batch = self._compute_values(batch, timing_raw)
            batch = self._compute_advantage(batch, metrics, timing_raw)
            self._update_models(batch, metrics, timing_raw)
            self._maybe_dump_rollout(batch)
            if self._due(trainer_cfg.test_freq, is_last_step) and self.val_reward_fn is not None:
                with self._timed("testing", timing_raw):
                    metrics.update(self._validate())
            if self._due(trainer_cfg.save_freq, is_last_step):
                with self._timed("save_checkpoint", timing_raw):
                    self._save_checkpoint()
        metrics.update({"training/global_step": self.global_steps, "training/epoch": epoch})
        metrics.update(compute_data_metrics(batch=batch, use_critic=self.use_critic))
        metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
        n_gpus = self.resource_pool_manager.get_n_gpus()
        metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus))
        return metrics

    def _due(self, freq: int, is_last_step: bool) -> bool:
        return freq > 0 and (is_last_step or self.global_steps % freq == 0)

    def _maybe_dump_rollout(self, batch: DataProto) -> None:
        dump_dir = self.config.trainer.get("rollout_data_dir")
        if not dump_dir:
            return
        inputs = self.tokenizer.batch_decode(batch.batch["prompts"], skip_special_tokens=True)
        outputs = self._decode_responses(batch)
        scores = batch.batch["token_level_scores"].sum(-1).tolist()
        gts = [item.get("ground_truth") if isinstance(item, dict) else None
               for item in batch.non_tensor_batch.get("reward_model", [None] * len(batch))]
        self._maybe_dump_generations(inputs, outputs, scores, os.path.expanduser(dump_dir), gts=gts)
