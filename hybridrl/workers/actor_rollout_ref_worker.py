"""``ActorRolloutRefWorker``: the policy's worker — training actor, rollout engine and reference policy.

One class plays any combination of the three roles (verl's hybrid engine), chosen by ``role``:
``actor``, ``rollout``, ``ref``, ``actor_rollout``, ``actor_rollout_ref``. Each method is a thin
RPC surface: DataProto in → actor / rollout / ref call → DataProto out.

    generate_sequences   prompts                      → responses, input_ids, ... (rollout handle)
                         (``generate_sequences_nonblocking``: the same, enqueued; the async trainer modes)
    compute_log_prob     input_ids, responses, ...    → old_log_probs, entropys (+ sum_pi_squared with
                                                        actor.calculate_sum_pi_squared)
    compute_ref_log_prob input_ids, responses, ...    → ref_log_prob (+ topk_log_probs, topk_ids [B, R, K] when
                                                        meta_info["teacher_topk"] = K: a distillation teacher)
    update_actor         + advantages, old_log_probs  → meta_info["metrics"]
"""

from __future__ import annotations

import time
from typing import Any

import torch

from hybridrl.config.batch_plan import PolicyWorkerPlan
from hybridrl.config.worker_plan import standalone_batch_plan
from hybridrl.protocol import DataProto
from hybridrl.single_controller.base import Worker
from hybridrl.single_controller.base.decorator import Dispatch, register
from hybridrl.utils.config_defaults import section_with_defaults
from hybridrl.utils.device import current_device, get_device_name, memory_metrics
from hybridrl.utils.distributed import init_worker_distributed
from hybridrl.workers import engine
from hybridrl.workers.actor import DataParallelPPOActor
from hybridrl.workers.actor.distillation_update import TEACHER_TOPK_META_KEY
from hybridrl.workers.engine import ModelSpec, build_fsdp_module, on_device
from hybridrl.workers.sharding_manager import build_rollout_handle
from hybridrl.workers.sharding_manager.fsdp_ulysses import UlyssesShardingManager, build_sp_group
from hybridrl.workers.weight_transfer_methods import WeightTransferMethods

__all__ = ["ActorRolloutRefWorker"]


ROLES = ("actor", "rollout", "ref", "actor_rollout", "actor_rollout_ref")


class ActorRolloutRefWorker(WeightTransferMethods, Worker):
    """Policy worker (verl 0.5 API).

    Args:
        config: the ``actor_rollout_ref`` section (verl keys); copied, resolved, keys it lacks filled from the
            YAML. It is not modified afterwards.
        role: one of :data:`ROLES`.
        plan: the driver's batch plan for this worker (per-rank mini/micro sizes, log-prob micro-batches, the
            LR horizon); None (a worker built by user code) computes it from ``config`` and this worker
            group's size, as verl's worker normalises its section.
    """

    actor_class: type[DataParallelPPOActor] = DataParallelPPOActor  # a recipe worker may train another actor

    def __init__(self, config: Any, role: str, plan: PolicyWorkerPlan | None = None) -> None:
        super().__init__()
        if role not in ROLES:
            raise ValueError(f"ActorRolloutRefWorker role={role!r} is not one of {ROLES}.")
        self.config = section_with_defaults(config, "actor_rollout_ref")
        self.role = role
        self._is_actor = role in ("actor", "actor_rollout", "actor_rollout_ref")
        self._is_rollout = role in ("rollout", "actor_rollout", "actor_rollout_ref")
        self._is_ref = role in ("ref", "actor_rollout_ref")
        self._is_lora = engine.lora_enabled(self.config.model)
        self._device_name = get_device_name()
        world_size = init_worker_distributed(self._device_name)
        self.plan = plan if plan is not None else self._standalone_plan(world_size)
        if self._is_actor:
            self.plan.old_log_prob.require("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu")
        if self._is_ref or (self._is_lora and self._is_actor):
            self.plan.ref_log_prob.require("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu")
        self.ulysses = UlyssesShardingManager(self._build_sp_group())
        self.actor_module: Any = None
        self.actor_optimizer: torch.optim.Optimizer | None = None
        self.actor_lr_scheduler: Any = None
        self.rollout: Any = None
        self._checkpoint_manager: Any = None

    # ------------------------------------------------------------------ build

    def _standalone_plan(self, world_size: int) -> PolicyWorkerPlan:
        """The plan of a worker built without one: this group is the world; its sections' batch checks raise."""
        checked = []
        if self._is_actor:
            checked += ["actor_rollout_ref.actor.", "actor_rollout_ref.rollout.log_prob"]
        if self._is_ref or (self._is_lora and self._is_actor):
            checked.append("actor_rollout_ref.ref.log_prob")
        return standalone_batch_plan(self.config, "actor_rollout_ref", world_size, checked).policy_worker_plan()

    def _build_sp_group(self) -> Any:
        """Ulysses SP group when ``ulysses_sequence_parallel_size > 1`` (actor's; the ref must agree)."""
        sizes = {
            section: int(self.config[section].ulysses_sequence_parallel_size or 1)
            for section, active in (("actor", self._is_actor), ("ref", self._is_ref))
            if active
        }
        sp_size = max(sizes.values(), default=1)
        if sp_size == 1:
            return None
        if len(set(sizes.values())) > 1:
            raise ValueError(
                f"actor_rollout_ref.actor/ref.ulysses_sequence_parallel_size differ ({sizes}) in one worker; set them equal."
            )
        if not self.config.model.use_remove_padding:
            raise ValueError(
                "ulysses_sequence_parallel_size > 1 needs actor_rollout_ref.model.use_remove_padding=True (as in verl)."
            )
        return build_sp_group(sp_size)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Build tokenizer, actor (+ optimizer, LR scheduler), rollout handle and ref, as the role asks."""
        model_config = self.config.model
        self.tokenizer = engine.build_tokenizer(
            model_config.get("tokenizer_path") or model_config.path,
            trust_remote_code=bool(model_config.trust_remote_code),
            custom_chat_template=model_config.get("custom_chat_template"),
        )
        use_remove_padding = bool(model_config.use_remove_padding)
        if self._is_actor:
            self._build_actor(use_remove_padding)
        elif self._is_rollout:  # rollout-only: no actor copy; the engine loads model.path, then takes pushed weights
            self.hf_config = self._rollout_hf_config()
        if self._is_rollout:
            self.rollout = build_rollout_handle(
                self.config.rollout,
                model_config,
                tokenizer=self.tokenizer,
                hf_config=self.hf_config,
                actor_module=self.actor_module,
                device_name=self._device_name,
            )
        if self._is_ref and not (self._is_lora and self._is_actor):  # LoRA: ref = actor with adapters off (verl)
            self._build_ref(use_remove_padding)

    def _build_actor(self, use_remove_padding: bool) -> None:
        actor_config = self.config.actor
        spec = ModelSpec(
            self.config.model,
            actor_config.fsdp_config,
            actor_config.strategy,
            "causal_lm",
            True,
            sp_group=self.ulysses.group,
        )
        self.actor_module, self.hf_config = build_fsdp_module(spec, self._device_name)
        if self._is_actor:
            self.actor_optimizer = engine.build_optimizer(self.actor_module, actor_config.optim)
            self.actor_lr_scheduler = engine.build_lr_scheduler(
                self.actor_optimizer, actor_config.optim, self.plan.total_training_steps
            )
        self.actor = self.actor_class(
            actor_config,
            self.actor_module,
            self.actor_optimizer,
            use_remove_padding=use_remove_padding,
            enable_activation_offload=bool(self.config.model.enable_activation_offload),
            share_prompt_prefix=bool(self.config.model.share_prompt_prefix),
            update=self.plan.actor,
            log_prob=self.plan.old_log_prob,
            temperature=float(self.config.rollout.temperature),
            moe_load_balance_metrics_interval=int(self.config.rollout.get("moe_load_balance_metrics_interval") or 0),
        )
        self._offload_actor(optimizer_too=True)

    def _build_ref(self, use_remove_padding: bool) -> None:
        ref_config = self.config.ref
        strategy = ref_config.get("strategy") or self.config.actor.strategy
        spec = ModelSpec(
            self.config.model, ref_config.get("fsdp_config", {}), strategy, "causal_lm", False, self.ulysses.group
        )
        self.ref_module, ref_hf_config = build_fsdp_module(spec, self._device_name)
        if not (self._is_actor or self._is_rollout):
            self.hf_config = ref_hf_config
        self.ref_policy = DataParallelPPOActor(
            ref_config,
            self.ref_module,
            use_remove_padding=use_remove_padding,
            share_prompt_prefix=bool(self.config.model.share_prompt_prefix),
            log_prob=self.plan.ref_log_prob,
            temperature=float(self.config.rollout.temperature),
        )

    # ------------------------------------------------------------------ offload helpers

    def _actor_fsdp_flags(self) -> tuple[bool, bool]:
        fsdp_config = self.config.actor.fsdp_config
        return bool(fsdp_config.param_offload), bool(fsdp_config.optimizer_offload)

    def _offload_actor(self, optimizer_too: bool) -> None:
        param_offload, optimizer_offload = self._actor_fsdp_flags()
        if param_offload:
            engine.offload_model(self.actor_module)
        if optimizer_too and optimizer_offload and self.actor_optimizer is not None:
            engine.offload_optimizer(self.actor_optimizer)

    def _actor_on_device(self, with_optimizer: bool) -> Any:
        param_offload, optimizer_offload = self._actor_fsdp_flags()
        return on_device(self.actor_module, self.actor_optimizer, param_offload, with_optimizer and optimizer_offload)

    # ------------------------------------------------------------------ RPC surface

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate responses with the rollout handle (it syncs the actor's weights first when stale)."""
        if not self._is_rollout:
            raise RuntimeError(f"generate_sequences needs a rollout role; this worker has role={self.role!r}.")
        prompts.meta_info.setdefault("eos_token_id", self.tokenizer.eos_token_id)
        prompts.meta_info.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        with self._actor_on_device(with_optimizer=False):
            output = self.rollout.generate_sequences(prompts.to(current_device()))
        return output.to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def generate_sequences_nonblocking(self, prompts: DataProto) -> DataProto:
        """``generate_sequences`` that the driver enqueues without waiting (it gets a DataProtoFuture): the async
        trainer modes. Adds the worker-side wall span, ``async/rollout_{start,end}_unix`` in the metrics."""
        start = time.time()
        output = self.generate_sequences(prompts)
        metrics = output.meta_info.setdefault("metrics", {})
        metrics.update({"async/rollout_start_unix": start, "async/rollout_end_unix": time.time()})
        return output

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs [B, R]`` and ``entropys [B, R]`` under the current actor (rollout.log_prob_* sizes), and
        with ``actor.calculate_sum_pi_squared`` ``sum_pi_squared [B, R]`` (Σ_v π(v)² per token, verl 0.9's key)."""
        if not self._is_actor:
            raise RuntimeError(f"compute_log_prob needs an actor role; this worker has role={self.role!r}.")
        data = self.ulysses.preprocess_data(data.to(current_device()))
        with self._actor_on_device(with_optimizer=False):
            outputs = self.actor.compute_token_outputs(
                data, calculate_entropy=True, calculate_sum_pi_squared=bool(self.config.actor.calculate_sum_pi_squared)
            )
        self._reshard_fsdp1_root()
        tensors = {"old_log_probs": outputs.pop("log_probs"), **outputs}  # + entropys (+ sum_pi_squared)
        output = DataProto.from_dict(
            tensors=tensors,
            meta_info={"temperature": self.config.rollout.temperature},
        )
        return self.ulysses.postprocess_data(output).to("cpu")

    def _reshard_fsdp1_root(self) -> None:
        if self.world_size > 1 and engine.fsdp_version(self.actor_module) == 1:
            # FSDP1 keeps the root's unsharded params after an eval forward; reshard to free them (as verl)
            root_handle = getattr(self.actor_module, "_handle", None)
            if root_handle is not None:
                root_handle.reshard(True)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob [B, R]`` under the frozen reference policy (ref.log_prob_* sizes).

        With LoRA (``model.lora_rank > 0``) the reference is the actor with its adapters disabled, i.e.
        the base model (verl's ``ref_in_actor``): no second model is built.
        """
        use_actor_as_ref = self._is_lora and self._is_actor
        if not (self._is_ref or use_actor_as_ref):
            raise RuntimeError(f"compute_ref_log_prob needs a ref role; this worker has role={self.role!r}.")
        # a distillation teacher of forward_kl_topk: + its top-k log-probs and ids [B, R, K]
        topk = int(data.meta_info.get(TEACHER_TOPK_META_KEY) or 0)
        data = self.ulysses.preprocess_data(data.to(current_device()))
        if use_actor_as_ref:
            with self._actor_on_device(with_optimizer=False), engine.disable_adapter(self.actor_module):
                outputs = self.actor.compute_token_outputs(data, micro_batching=self.plan.ref_log_prob, topk=topk)
            self._reshard_fsdp1_root()
        else:
            outputs = self.ref_policy.compute_token_outputs(data, topk=topk)
        tensors = {"ref_log_prob": outputs.pop("log_probs"), **outputs}  # (+ topk_log_probs, topk_ids)
        return self.ulysses.postprocess_data(DataProto.from_dict(tensors=tensors)).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        """One PPO update; returns ``meta_info["metrics"]`` (actor/*, actor/lr, perf/*) and steps the LR schedule."""
        if not self._is_actor:
            raise RuntimeError(f"update_actor needs an actor role; this worker has role={self.role!r}.")
        data = self.ulysses.preprocess_data(data.to(current_device()))  # the SP group trains on its union
        guard = self.actor.divergence_guard
        skipped_before = guard.skipped_total
        with self._actor_on_device(with_optimizer=True):
            metrics: dict[str, Any] = self.actor.update_policy(data)  # DivergenceError when the run diverged
            metrics.update(memory_metrics())
            metrics["actor/skipped_steps"] = guard.skipped_total - skipped_before  # non-finite grad norm
            metrics["actor/lr"] = self.actor_lr_scheduler.get_last_lr()[0]
            self.actor_lr_scheduler.step()
        if self.rollout is not None:
            self.rollout.mark_weights_stale()
        return DataProto(meta_info={"metrics": metrics})

    # ------------------------------------------------------------------ checkpoints

    def _checkpoint(self) -> Any:
        if self._checkpoint_manager is None:
            self._checkpoint_manager = engine.FSDPCheckpointManager(
                model=self.actor_module,
                optimizer=self.actor_optimizer,
                lr_scheduler=self.actor_lr_scheduler,
                processing_class=self.tokenizer,
                checkpoint_config=self.config.actor.get("checkpoint"),
            )
        return self._checkpoint_manager

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, global_step: int = 0, max_ckpt_to_keep: int | None = None
    ) -> None:
        """Save the actor (model, optimizer, LR scheduler, RNG) in verl's layout under ``local_path``.

        Refused (DivergenceError) when the latest optimizer step had a non-finite grad norm or a weight is NaN/inf.
        """
        with self._actor_on_device(with_optimizer=True):
            if self._is_actor:
                self.actor.divergence_guard.check_savable(self.actor_module)
            self._checkpoint().save_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep
            )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        """Restore the actor from ``local_path``; the rollout re-syncs its weights before the next generation."""
        with self._actor_on_device(with_optimizer=True):
            self._checkpoint().load_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
            )
        if self.rollout is not None:
            self.rollout.mark_weights_stale()
