"""``MegatronCriticWorker``: the value model's worker with ``critic.strategy=megatron`` (verl's Megatron critic API).

The RPC surface and DataProto contract are :class:`hybridrl.workers.critic_worker.CriticWorker`'s::

    compute_values  input_ids, responses, attention_mask, position_ids → values [B, R]
    update_critic   + response_mask, values, returns                   → meta_info["metrics"]
                      (critic/vf_loss, vf_clipfrac, vpred_mean, grad_norm, lr, skipped_steps, perf/*)

only the model differs: a megatron-core value model (:mod:`hybridrl.workers.megatron.value_model`, the
``critic.megatron`` layout) trained by :class:`hybridrl.workers.megatron.critic.MegatronPPOCritic`.

Dispatch (verl 0.5's Megatron workers): the model-parallel groups are made in the constructor and each rank
registers its DP rank on the mesh ``"critic"``; ``compute_values`` and ``update_critic`` split the batch over DP
ranks, give every rank of a TP (and CP) group the same slice and collect from TP rank 0, CP rank 0. Per-rank
batch sizes count DP ranks (``world / (TP × PP × CP)``). Checkpoints: :mod:`hybridrl.workers.megatron.checkpoint`
(verl's per-rank layout). Offload (``critic.megatron.param_offload`` / ``grad_offload`` / ``optimizer_offload``):
:mod:`hybridrl.workers.megatron.offload`, after the build and around each call, as verl's Megatron critic. Not
implemented yet (they raise): PP > 1, CP > 1 on CPU (written for the GPU, never run:
:mod:`hybridrl.workers.megatron.context_parallel`).
"""

from __future__ import annotations

from typing import Any

from hybridrl.config.batch_plan import CriticWorkerPlan
from hybridrl.protocol import DataProto
from hybridrl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from hybridrl.workers import engine
from hybridrl.workers.critic_worker import CriticWorker
from hybridrl.workers.megatron.actor import MegatronOptimizerHandle
from hybridrl.workers.megatron.critic import MegatronPPOCritic
from hybridrl.workers.megatron.engine import build_megatron_lr_scheduler, build_megatron_optimizer
from hybridrl.workers.megatron.offload import MegatronOffload, OffloadFlags
from hybridrl.workers.megatron.parallel import init_megatron_parallel
from hybridrl.workers.megatron.value_model import build_value_model, export_value_model_hf_weights
from hybridrl.workers.megatron.worker import data_parallel_size

__all__ = ["MegatronCriticWorker"]

MESH = "critic"  # the dispatch mesh of the critic's data-parallel ranks


class MegatronCriticWorker(CriticWorker):
    """Critic worker on megatron-core (same arguments as :class:`CriticWorker`: the ``critic`` section of
    ``ppo_megatron_trainer.yaml`` and the driver's :class:`CriticWorkerPlan`, or None)."""

    def __init__(self, config: Any, plan: CriticWorkerPlan | None = None) -> None:
        super().__init__(config, plan)
        rank = init_megatron_parallel(self.config.megatron, self._device_name)
        self._register_dispatch_collect_info(MESH, dp_rank=rank.dp_rank, is_collect=rank.is_collect_rank)

    def _standalone_plan(self, world_size: int) -> CriticWorkerPlan:
        """Per-rank sizes over the data-parallel ranks only (a TP group shares one slice of the batch): the batch plan
        divides the ranks by ``critic.megatron``'s TP × PP × CP itself (critic.strategy=megatron)."""
        data_parallel_size(world_size, self.config.megatron, "critic.megatron")  # raises when TP × PP × CP ∤ ranks
        return super()._standalone_plan(world_size)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Build the tokenizer, the value model (HF trunk + the FSDP critic's value head), megatron-core's
        optimizer over it, verl's Megatron LR schedule and the PPO critic."""
        config = self.config
        model_config = config.model
        self.tokenizer = engine.build_tokenizer(
            model_config.get("tokenizer_path") or model_config.path,
            trust_remote_code=bool(model_config.trust_remote_code),
        )
        self.critic_model = build_value_model(model_config, config.megatron, "critic.megatron", self._device_name,
                                              trainable=True)
        self.critic_module = self.critic_model.causal_lm
        optimizer = build_megatron_optimizer(self.critic_model, config.optim, config.megatron)
        self.critic_optimizer = MegatronOptimizerHandle(optimizer, self.critic_model)  # type: ignore[assignment]
        self.critic_lr_scheduler = build_megatron_lr_scheduler(optimizer, config.optim, self.plan.total_training_steps)
        self.critic = MegatronPPOCritic(
            config,
            self.critic_model,
            self.critic_optimizer,  # type: ignore[arg-type]
            use_remove_padding=bool(model_config.use_remove_padding),
            update=self.plan.critic,
            values=self.plan.values,
        )
        self._offload = MegatronOffload(self.critic_model, optimizer, OffloadFlags.of(config.megatron))
        self._offload.offload()  # critic.megatron.*_offload: off the device until the first call

    def _on_device(self, with_optimizer: bool) -> Any:
        return self._offload.on_device(with_optimizer)

    # ------------------------------------------------------------------ RPC surface: DP slices shared by a TP group

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name=MESH))
    def compute_values(self, data: DataProto) -> DataProto:
        """``values [B, R]`` (the FSDP worker's, on this DP slice)."""
        return super().compute_values(data)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name=MESH))
    def update_critic(self, data: DataProto) -> DataProto:
        """One value-loss update on this DP slice; ``meta_info["metrics"]`` (the FSDP worker's)."""
        return super().update_critic(data)

    # ------------------------------------------------------------------ checkpoints

    def _checkpoint_contents(self, key: str) -> list[str]:
        from hybridrl.workers.engine.checkpoint import checkpoint_contents

        return checkpoint_contents(self.config.checkpoint, key)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, hdfs_path: str | None = None, global_step: int = 0,
                        max_ckpt_to_keep: int | None = None) -> None:
        """Save the critic (TP shards, optimizer, LR scheduler, RNG; ``hf_model``: a token-classification HF copy) in
        verl's per-rank Megatron layout under ``local_path`` (:mod:`hybridrl.workers.megatron.checkpoint`); refused
        (DivergenceError) after a non-finite step, as the FSDP critic's."""
        from hybridrl.workers.megatron.checkpoint import save_megatron_checkpoint

        if hdfs_path is not None:
            raise NotImplementedError("hdfs_path is not supported; checkpoints are written to local_path only.")
        optimizer = self.critic_optimizer.optimizer
        with self._on_device(with_optimizer=True):
            self.critic.divergence_guard.check_savable(self.critic_module)
            save_megatron_checkpoint(local_path, self.critic_model, optimizer, self.critic_lr_scheduler,
                                     save_contents=self._checkpoint_contents("save_contents"), tokenizer=self.tokenizer,
                                     global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep,
                                     hf_weights=export_value_model_hf_weights)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = True) -> None:
        """Restore the critic from ``local_path`` (None: no-op). ``del_local_after_load`` is accepted for verl's
        signature and ignored (the folder is kept)."""
        from hybridrl.workers.megatron.checkpoint import load_megatron_checkpoint

        if local_path is None:
            return
        if hdfs_path is not None:
            raise NotImplementedError("hdfs_path is not supported; pass a local checkpoint folder.")
        optimizer = self.critic_optimizer.optimizer
        with self._on_device(with_optimizer=True):
            load_megatron_checkpoint(local_path, self.critic_model, optimizer, self.critic_lr_scheduler,
                                     load_contents=self._checkpoint_contents("load_contents"))
