"""RayPPOTrainer: the single controller that runs PPO / GRPO and their variants, assembled from parts.

    driver: RayPPOTrainer.fit, inside the TaskRunner Ray actor; for each dataloader batch of prompts:
      │
      ├─ batch_collector ─► generate ──────────────────────► reward
      │                     actor_rollout (hybrid engine:     reward fn (+ rm)
      │                     sync weights → generate)
      │                     + uid, prompts, responses,        + token_level_scores
      │                       response_mask (ReMax: + reward_baselines)
      │
      ├─ update_stage ────► old_log_prob ─► ref_log_prob ─► values ──► advantage ────────► update_critic ─► update_actor
      │                     actor_rollout   ref             critic     (driver)             critic          actor_rollout
      │                     + old_log_probs + ref_log_prob  + values   + token_level_rewards,
      │                                                                  advantages, returns
      │
      └─ validator (every trainer.test_freq) · checkpointer (every trainer.save_freq)

Every arrow is a DataProto handed to a worker group method (Dispatch.DP_COMPUTE_PROTO: split across the
data-parallel ranks, results concatenated). Light work (advantages, KL-in-reward, metrics, batch balancing)
runs here; the driver never holds model weights. With the critic on a pool of its own (split placement,
``critic.enable_resource_pool``) update_critic and update_actor run at the same time.

The trainer owns its parts instead of inheriting them:

    workers          WorkerGroups(actor_rollout, critic, ref, rm)     worker_groups.py (spawned by init_workers)
    batch_collector  prompts → the step's scored batch                batch_collection.py (default: one generate)
    update_stage     scored batch → updated models                    ppo_update.py (default: PPO's stages)
    validator        held-out generations → val-core/val-aux metrics  validation.py
    checkpointer     save / resume in verl's layout                   checkpointing.py
    async_source     trainer.v1.trainer_mode=colocate_async |          async_source.py, async_pipeline/
                     separate_async: batches generated ahead, in place of the batch collector (docs/async-training.md)

Each stage is a function of ``stages.py`` that takes the batch and returns ``(batch, metrics)``. Recipes plug in
parts: DAPO a dynamic-sampling batch collector, online DPO and SPIN a DPO update stage; ReMax's greedy baseline
is part of the generate stage, selected by ``algorithm.adv_estimator=remax``.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.config import compute_batch_plan, format_batch_plan
from hybridrl.experimental.dataset.sampler import AbstractCurriculumSampler
from hybridrl.protocol import DataProto
from hybridrl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup, create_colocated_worker_cls
from hybridrl.trainer.ppo import stages
from hybridrl.trainer.ppo.async_pipeline import AsyncBatchSource, AsyncSettings
from hybridrl.trainer.ppo.async_source import make_async_source
from hybridrl.trainer.ppo.batch_advantage import apply_kl_penalty, compute_advantage, compute_response_mask
from hybridrl.trainer.ppo.batch_collection import BatchCollector, OneGenerationBatch, Rollout
from hybridrl.trainer.ppo.checkpointing import Checkpointer
from hybridrl.trainer.ppo.core_algos import AdvantageEstimator, get_kl_controller
from hybridrl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    compute_variance_proxy_metrics,
)
from hybridrl.trainer.ppo.ppo_update import PPOUpdate, UpdateStage
from hybridrl.trainer.ppo.protocols import RewardManager
from hybridrl.trainer.ppo.roles import ResourcePoolManager, Role, need_critic
from hybridrl.trainer.ppo.stages import TIMING_PREFIX, StageError, StepSettings, timed
from hybridrl.trainer.ppo.validation import Validator, decode_responses, dump_generations
from hybridrl.trainer.ppo.worker_groups import WorkerGroups, actor_role, create_worker_groups, critic_has_own_pool
from hybridrl.utils.config_defaults import with_defaults
from hybridrl.utils.dataset.rl_dataset import create_rl_sampler
from hybridrl.utils.progress import StepProgress
from hybridrl.utils.timer import simple_timer
from hybridrl.utils.tracking import Tracking, ValidationGenerationsLogger

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "AdvantageEstimator", "DataProto", "RayClassWithInitArgs", "RayPPOTrainer", "RayWorkerGroup",
    "ResourcePoolManager", "Role", "ValidationGenerationsLogger", "WorkerType", "apply_kl_penalty",
    "compute_advantage", "compute_data_metrics", "compute_response_mask", "compute_throughout_metrics",
    "compute_timing_metrics", "create_colocated_worker_cls", "simple_timer",
]

WorkerType = type


def _worker_group(field_name: str) -> property:
    """verl's ``trainer.<role>_wg`` attribute, read from and written to :attr:`RayPPOTrainer.workers`."""

    def get(self: RayPPOTrainer) -> Any:
        group = getattr(self.workers, field_name, None)
        if group is None:
            raise AttributeError(f"no {field_name} worker group (not used in this run, or init_workers() not called)")
        return group

    def set_(self: RayPPOTrainer, group: Any) -> None:
        placeholder = WorkerGroups(actor_rollout=None)  # type: ignore[arg-type]  # verl sets groups one by one
        self.workers = replace(self.workers or placeholder, **{field_name: group})

    return property(get, set_)


class RayPPOTrainer:
    """PPO/GRPO on Ray worker groups with verl 0.5's constructor, step order, metrics and checkpoints.

    Beyond verl's arguments, a recipe may pass ``batch_collector`` (how a step's scored batch is collected;
    default :class:`OneGenerationBatch`) and ``update_stage`` (what the step does with it; default
    :class:`PPOUpdate`).
    """

    actor_rollout_wg = _worker_group("actor_rollout")
    critic_wg = _worker_group("critic")
    ref_policy_wg = _worker_group("ref")
    rm_wg = _worker_group("rm")

    def __init__(self, config: DictConfig, tokenizer: PreTrainedTokenizerBase,
                 role_worker_mapping: dict[Role, WorkerType], resource_pool_manager: ResourcePoolManager,
                 ray_worker_group_cls=RayWorkerGroup, processor=None, reward_fn: RewardManager | None = None,
                 val_reward_fn: RewardManager | None = None, train_dataset=None, val_dataset=None,
                 collate_fn=None, train_sampler=None, device_name: str | None = None, *,
                 batch_collector: BatchCollector | None = None, update_stage: UpdateStage | None = None):
        self.config = config = with_defaults(config)  # a config that predates a key gets the YAML's value
        self.tokenizer = tokenizer
        self.processor = processor
        self.reward_fn = reward_fn
        self.val_reward_fn = val_reward_fn
        self.async_settings = AsyncSettings.from_config(config.trainer)  # None: sync (verl 0.5's loop)
        self._check_supported(config, role_worker_mapping, batch_collector)
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
        if config.algorithm.filter_groups.enable and batch_collector is None:
            warnings.warn("algorithm.filter_groups.enable=True is ignored by main_ppo's trainer; DAPO dynamic "
                          "sampling runs with: python -m hybridrl.recipes.dapo.main_dapo", stacklevel=2)
        self.global_steps = 0
        self.logger: Tracking | None = None
        self.workers: WorkerGroups | None = None
        self.async_source: AsyncBatchSource | None = None  # colocate_async / separate_async: made by fit
        self._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)
        self.settings = StepSettings.from_config(config, tokenizer)
        self.batch_collector: BatchCollector = batch_collector or OneGenerationBatch()
        self.update_stage: UpdateStage = update_stage or PPOUpdate(
            self.settings, self.kl_ctrl_in_reward, config.trainer.critic_warmup,
            overlap_updates=critic_has_own_pool(resource_pool_manager),
        )
        self.validator = Validator(
            tokenizer, self.val_dataloader, val_reward_fn, config.actor_rollout_ref.rollout.val_kwargs,
            log_generations=config.trainer.log_val_generations, dump_dir=config.trainer.validation_data_dir,
        )
        self.checkpointer = Checkpointer.from_config(config.trainer)

    def _check_supported(
        self, config: DictConfig, role_worker_mapping: dict, batch_collector: BatchCollector | None
    ) -> None:
        if not config.actor_rollout_ref.hybrid_engine:
            raise ValueError("actor_rollout_ref.hybrid_engine=False is not supported: hybridrl runs the hybrid engine")
        separate = self.async_settings is not None and not self.async_settings.colocated
        needed = (Role.Actor, Role.Rollout) if separate else (Role.ActorRollout, Role.ActorRolloutRef)
        if separate and not all(role in role_worker_mapping for role in needed):
            raise ValueError("trainer.v1.trainer_mode=separate_async needs Role.Actor and Role.Rollout in "
                             "role_worker_mapping (the rollout on a pool of its own)")
        if not separate and not any(role in role_worker_mapping for role in needed):
            raise ValueError("role_worker_mapping needs Role.ActorRollout or Role.ActorRolloutRef")
        if self.async_settings is not None and batch_collector is not None:
            raise ValueError(f"trainer.v1.trainer_mode={self.async_settings.mode} supplies each step's batch itself; "
                             "a recipe's batch_collector (e.g. DAPO dynamic sampling) needs trainer_mode=sync")

    # ------------------------------------------------------------------ set-up
    def _create_dataloader(self, train_dataset, val_dataset, collate_fn, train_sampler) -> None:
        from torchdata.stateful_dataloader import StatefulDataLoader

        data = self.config.data
        batch_size = data.gen_batch_size or data.train_batch_size
        if train_sampler is None:  # verl 0.5: data.shuffle / data.sampler.* decide
            train_sampler = create_rl_sampler(data, train_dataset)
        self.train_dataloader = StatefulDataLoader(
            dataset=train_dataset, batch_size=batch_size, num_workers=data.dataloader_num_workers, drop_last=True,
            collate_fn=collate_fn, sampler=train_sampler,
        )
        self.val_dataloader = StatefulDataLoader(
            dataset=val_dataset, batch_size=data.val_batch_size or len(val_dataset),
            num_workers=data.dataloader_num_workers, shuffle=data.validation_shuffle, drop_last=False,
            collate_fn=collate_fn,
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
        self.workers = create_worker_groups(
            self._worker_init_kwargs(), self.role_worker_mapping, self.resource_pool_manager,
            self.ray_worker_group_cls, self.device_name, use_reference_policy=self.use_reference_policy,
        )
        if self.config.distillation.enabled:  # on-policy distillation: the teachers on their own pool
            from hybridrl.trainer.distillation.teachers import spawn_teachers

            teachers = spawn_teachers(self.config, self.resource_pool_manager.resource_pool_dict,
                                      self.ray_worker_group_cls, self.device_name, self.batch_plan.policy_worker_plan())
            self.workers = replace(self.workers, teachers=teachers)
        if self.config.actor_rollout_ref.rollout.mode == "async":  # server-mode rollout through agent loops
            from hybridrl.experimental.agent_loop import AgentLoopManager

            servers = self.workers.standalone_rollout  # separate_async: the rollout's own pool serves
            servers = self.workers.actor_rollout if servers is None else servers
            from hybridrl.trainer.ppo.reward import streaming_reward_handles

            reward_handles = streaming_reward_handles(self.config, self.reward_fn)  # reward loop: score as loops end
            self.async_rollout_manager = AgentLoopManager(self.config, servers, reward_handles)
            self.workers = replace(self.workers, rollout_manager=self.async_rollout_manager)

    def _worker_init_kwargs(self) -> dict[Role, dict[str, Any]]:
        """The constructor arguments of each spawned role's worker class (the keys are the roles spawned); each
        worker gets its frozen part of the batch plan."""
        actor = actor_role(self.role_worker_mapping)
        policy_plan = self.batch_plan.policy_worker_plan()
        init_kwargs: dict[Role, dict[str, Any]] = {
            actor: {"config": self.config.actor_rollout_ref, "role": str(actor), "plan": policy_plan},
        }
        if self.use_critic:
            init_kwargs[Role.Critic] = {"config": self.config.critic, "plan": self.batch_plan.critic_worker_plan()}
        if self.use_reference_policy and not self.ref_in_actor and actor != Role.ActorRolloutRef:
            init_kwargs[Role.RefPolicy] = {"config": self.config.actor_rollout_ref, "role": "ref", "plan": policy_plan}
        if self.use_rm:
            init_kwargs[Role.RewardModel] = {"config": self.config.reward_model, "plan": self.batch_plan.reward_model}
        if Role.Rollout in self.role_worker_mapping:  # separate_async: the rollout's own workers
            init_kwargs[Role.Rollout] = {"config": self.config.actor_rollout_ref, "role": "rollout", "plan": policy_plan}
        return init_kwargs

    def _worker_groups(self) -> WorkerGroups:
        if self.workers is None:
            raise RuntimeError("the worker groups do not exist yet: call init_workers() first")
        return self.workers

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
        self._start_async_source()
        self.global_steps += 1
        for batch_dict in self._step_inputs():
            metrics = self._train_step(batch_dict, epoch=(self.global_steps - 1) // steps_per_epoch)
            if metrics is None:  # the batch collector needs more prompts for this step (DAPO dynamic sampling)
                continue
            val_metrics = {k: v for k, v in metrics.items() if k.startswith("val-")} or val_metrics
            self.logger.log(data=metrics, step=self.global_steps)
            progress.update(self.global_steps, {k: metrics[k] for k in ("critic/score/mean",) if k in metrics})
            if self.global_steps >= self.total_training_steps:
                print(f"[trainer] done. final validation: {json.dumps(val_metrics)}", flush=True)
                self.logger.finish()
                if self.async_source is not None:
                    self.async_source.close()
                return val_metrics
            self.global_steps += 1
        raise AssertionError("unreachable")

    def _step_inputs(self) -> Iterator[dict | None]:
        """Sync: the dataloader's batches, pass after pass (a resumed, exhausted epoch yields none and moves on).
        Async modes: None per step (the async source draws its prompts ahead)."""
        if self.async_source is not None:
            yield from itertools.repeat(None)
        for _ in itertools.count():
            yield from self.train_dataloader

    def _start_async_source(self) -> None:
        """colocate_async / separate_async: the source of each step's batch, at the restored step (fit, after
        the checkpoint is loaded: the dataloader state is restored before its first prompts are drawn)."""
        if self.async_settings is None:
            return
        self.async_source = make_async_source(self.async_settings, self._worker_groups(), self.train_dataloader,
                                              self.settings, self.reward_fn)
        self.async_source.start(self.global_steps)

    def _train_step(self, batch_dict: dict | None, epoch: int) -> dict[str, Any] | None:
        """One step; a failure is re-raised as a StageError naming the step and the stage it happened in."""
        try:
            prompts = None if batch_dict is None else DataProto.from_single_dict(batch_dict)
            return self._run_step(prompts, epoch)
        except StageError as error:
            if error.step is not None:
                raise
            raise StageError(error.stage, error.cause, step=self.global_steps) from error
        except Exception as error:
            raise StageError("step", f"{type(error).__name__}: {error}", step=self.global_steps) from error

    def _run_step(self, prompts: DataProto | None, epoch: int) -> dict[str, Any] | None:
        """collect → update → validate/save when due; the step's metrics, or None while collecting."""
        start = time.perf_counter()
        workers = self._worker_groups()
        if self.async_source is None:
            rollout = Rollout(workers, self.settings, self.reward_fn, self.global_steps)
            batch, metrics = self.batch_collector.collect(prompts, rollout)
        else:  # the batch generated ahead (staleness-checked) and scored
            batch, metrics = self.async_source.next_batch(self.global_steps, self._next_barrier())
        if batch is None:
            return None
        batch, update_metrics = self.update_stage.run(batch, workers, self.global_steps)
        if self.async_source is not None:
            barrier = self._next_barrier() == self.global_steps
            update_metrics = {**update_metrics,
                              **self.async_source.after_update(self.global_steps, self._next_barrier(), barrier)}
        self._maybe_dump_rollout(batch)
        metrics = {**metrics, **update_metrics, **self._validate_and_save_if_due()}
        step_key = TIMING_PREFIX + "step"  # a collector may carry time spent on generation batches before this one
        metrics[step_key] = metrics.get(step_key, 0.0) + time.perf_counter() - start
        timing_raw = {k[len(TIMING_PREFIX):]: v for k, v in metrics.items() if k.startswith(TIMING_PREFIX)}
        if isinstance(self.train_dataloader.sampler, AbstractCurriculumSampler):  # experimental, as verl 0.5
            self.train_dataloader.sampler.update(batch=batch)
        return {
            **metrics, "training/global_step": self.global_steps, "training/epoch": epoch,
            **self.update_stage.data_metrics(batch, workers),
            **compute_timing_metrics(batch=batch, timing_raw=timing_raw),
            **compute_throughout_metrics(batch=batch, timing_raw=timing_raw,
                                         n_gpus=self.resource_pool_manager.get_n_gpus()),
            **compute_variance_proxy_metrics(batch=batch, gradient_norm=metrics.get("actor/grad_norm")),
        }

    def _validate_and_save_if_due(self) -> dict[str, Any]:
        trainer_cfg = self.config.trainer
        is_last_step = self.global_steps >= self.total_training_steps
        metrics: dict[str, Any] = {}
        if self._due(trainer_cfg.test_freq, is_last_step) and self.val_reward_fn is not None:
            with timed("testing", metrics):
                metrics.update(self._validate())
        if self._due(trainer_cfg.save_freq, is_last_step):
            with timed("save_checkpoint", metrics):
                self._save_checkpoint()
        return metrics

    def _due(self, freq: int, is_last_step: bool, step: int | None = None) -> bool:
        return freq > 0 and (is_last_step or (self.global_steps if step is None else step) % freq == 0)

    def _next_barrier(self) -> int:
        """The first step from the current one that saves or validates, or the last step: the async modes
        enqueue no generation past it (exact resume; validation sees the current weights)."""
        trainer_cfg, step = self.config.trainer, self.global_steps
        while step < self.total_training_steps:
            validates = self.val_reward_fn is not None and self._due(trainer_cfg.test_freq, False, step)
            if validates or self._due(trainer_cfg.save_freq, False, step):
                return step
            step += 1
        return self.total_training_steps

    def _maybe_dump_rollout(self, batch: DataProto) -> None:
        dump_dir = self.config.trainer.rollout_data_dir
        if not dump_dir:
            return
        inputs = self.tokenizer.batch_decode(batch.batch["prompts"], skip_special_tokens=True)
        outputs = decode_responses(self.tokenizer, batch)
        scores = batch.batch["token_level_scores"].sum(-1).tolist()
        gts = [item.get("ground_truth") if isinstance(item, dict) else None
               for item in batch.non_tensor_batch.get("reward_model", [None] * len(batch))]
        dump_generations(os.path.expanduser(dump_dir), self.global_steps, inputs, outputs, scores, gts=gts)

    # ------------------------------------------------------------------ verl's methods, delegating to the parts
    def _validate(self) -> dict[str, float]:
        return self.validator.validate(self._worker_groups().rollout, self.global_steps, self.logger)

    def _save_checkpoint(self) -> None:
        self.checkpointer.save(self.global_steps, self._worker_groups(), self.train_dataloader, self.kl_ctrl_in_reward)

    def _load_checkpoint(self) -> int:
        """Restore the run (0: from scratch); the update stage then re-derives what it keeps (DPO's reference)."""
        workers = self._worker_groups()
        global_steps = self.checkpointer.load(workers, self.train_dataloader, self.kl_ctrl_in_reward)
        self.update_stage.after_resume(workers, global_steps)
        return global_steps

    def _balance_batch(self, batch: DataProto, metrics: dict, logging_prefix: str = "global_seqlen") -> None:
        """verl's in-place form: reorder ``batch``'s rows over the actor's ranks, add the metrics to ``metrics``."""
        order, balance_metrics = stages.balance_order(batch, self.actor_rollout_wg.world_size, logging_prefix)
        batch.reorder(order)
        metrics.update(balance_metrics)
