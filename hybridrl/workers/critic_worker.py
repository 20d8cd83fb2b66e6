"""``CriticWorker``: the value model's worker (verl 0.5 API).

compute_values  input_ids, responses, attention_mask, position_ids → values [B, R]
update_critic   + response_mask, values, returns                   → meta_info["metrics"]
"""

from __future__ import annotations

from typing import Any

from hybridrl.config.batch_plan import CriticWorkerPlan
from hybridrl.config.worker_plan import standalone_batch_plan
from hybridrl.protocol import DataProto
from hybridrl.single_controller.base import Worker
from hybridrl.single_controller.base.decorator import Dispatch, register
from hybridrl.utils.config_defaults import section_with_defaults
from hybridrl.utils.device import current_device, get_device_name, memory_metrics
from hybridrl.utils.distributed import init_worker_distributed
from hybridrl.workers import engine
from hybridrl.workers.critic import DataParallelPPOCritic
from hybridrl.workers.engine import ModelSpec, build_fsdp_module, on_device
from hybridrl.workers.sharding_manager.fsdp_ulysses import UlyssesShardingManager, sp_group_from_config

__all__ = ["CriticWorker"]


class CriticWorker(Worker):
    """Value-model worker.

    Args:
        config: the ``critic`` section (verl keys); copied, resolved, keys it lacks filled from the YAML; not
            modified afterwards.
        plan: the driver's batch plan for the critic (per-rank mini/micro sizes, the value pass's micro-batches,
            the LR horizon); None computes it from ``config`` and this group's size
            (``mini per rank = ppo_mini_batch_size * rollout_n / dp``, ``dp = world / ulysses_sequence_parallel_size``).

    With ``ulysses_sequence_parallel_size = sp > 1`` the ``sp`` ranks of an SP group gather their chunks,
    each runs a ``1/sp`` slice of every packed sequence, and hands back its own rows (as the actor).

    With ``model.lora_rank > 0`` (FSDP2 only) the backbone gets peft LoRA adapters on ``model.target_modules``
    and the freshly initialised value head is trained in full (peft ``modules_to_save``); only these are in
    the optimizer. Checkpoints add ``lora_adapter/`` (adapters + head), as the actor's do.
    """

    def __init__(self, config: Any, plan: CriticWorkerPlan | None = None) -> None:
        super().__init__()
        self.config = section_with_defaults(config, "critic")
        self._device_name = get_device_name()
        world_size = init_worker_distributed(self._device_name)
        if plan is None:
            plan = self._standalone_plan(world_size)
        self.plan = plan
        plan.values.require("critic.forward_micro_batch_size_per_gpu")
        self.ulysses = UlyssesShardingManager(sp_group_from_config(self.config, "critic"))
        self._checkpoint_manager: Any = None

    def _standalone_plan(self, world_size: int) -> CriticWorkerPlan:
        """The plan of a critic built without one: this group is the world; the critic's batch checks raise."""
        return standalone_batch_plan(self.config, "critic", world_size, ["critic."]).critic_worker_plan()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the token-classification value model (``num_labels=1``), add LoRA when ``model.lora_rank > 0``,
        shard it, build optimizer (trainable parameters only) and LR schedule."""
        config = self.config
        model_config = config.model
        self.tokenizer = engine.build_tokenizer(
            model_config.get("tokenizer_path") or model_config.path,
            trust_remote_code=bool(model_config.trust_remote_code),
        )
        spec = ModelSpec(
            model_config,
            model_config.get("fsdp_config", {}),
            config.strategy,
            "token_classification",
            True,
            self.ulysses.group,
        )
        self.critic_module, self.hf_config = build_fsdp_module(spec, self._device_name)
        self.critic_optimizer = engine.build_optimizer(self.critic_module, config.optim)
        self.critic_lr_scheduler = engine.build_lr_scheduler(
            self.critic_optimizer, config.optim, self.plan.total_training_steps
        )
        self.critic = DataParallelPPOCritic(
            config,
            self.critic_module,
            self.critic_optimizer,
            use_remove_padding=bool(model_config.use_remove_padding),
            update=self.plan.critic,
            values=self.plan.values,
        )
        if self._offload_flags()[0]:
            engine.offload_model(self.critic_module)
        if self._offload_flags()[1]:
            engine.offload_optimizer(self.critic_optimizer)

    def _offload_flags(self) -> tuple[bool, bool]:
        fsdp_config = self.config.model.get("fsdp_config", {})
        return bool(fsdp_config.param_offload), bool(fsdp_config.optimizer_offload)

    def _on_device(self, with_optimizer: bool) -> Any:
        param_offload, optimizer_offload = self._offload_flags()
        return on_device(self.critic_module, self.critic_optimizer, param_offload, with_optimizer and optimizer_offload)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        """``values [B, R]`` (zero outside the response), with ``forward_micro_batch_size_per_gpu``."""
        data = self.ulysses.preprocess_data(data.to(current_device()))
        with self._on_device(with_optimizer=False):
            values = self.critic.compute_values(data)
        return self.ulysses.postprocess_data(DataProto.from_dict(tensors={"values": values})).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, data: DataProto) -> DataProto:
        """One value-loss update; returns ``meta_info["metrics"]`` (critic/*, critic/lr, perf/*)."""
        data = self.ulysses.preprocess_data(data.to(current_device()))  # the SP group trains on its union
        guard = self.critic.divergence_guard
        skipped_before = guard.skipped_total
        with self._on_device(with_optimizer=True):
            metrics: dict[str, Any] = self.critic.update_critic(data)  # DivergenceError when the run diverged
            metrics.update(memory_metrics())
            metrics["critic/skipped_steps"] = guard.skipped_total - skipped_before  # non-finite grad norm
            metrics["critic/lr"] = self.critic_lr_scheduler.get_last_lr()[0]
            self.critic_lr_scheduler.step()
        return DataProto(meta_info={"metrics": metrics})

    def _checkpoint(self) -> Any:
        if self._checkpoint_manager is None:
            self._checkpoint_manager = engine.FSDPCheckpointManager(
                model=self.critic_module,
                optimizer=self.critic_optimizer,
                lr_scheduler=self.critic_lr_scheduler,
                processing_class=self.tokenizer,
                checkpoint_config=self.config.get("checkpoint"),
            )
        return self._checkpoint_manager

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, global_step: int = 0, max_ckpt_to_keep: int | None = None
    ) -> None:
        """Save the critic in verl's layout under ``local_path`` (refused after a non-finite step, as the actor)."""
        with self._on_device(with_optimizer=True):
            self.critic.divergence_guard.check_savable(self.critic_module)
            self._checkpoint().save_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep
            )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = True) -> None:
        """Restore the critic (verl's critic default deletes the local copy after loading from HDFS)."""
        with self._on_device(with_optimizer=True):
            self._checkpoint().load_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
            )
