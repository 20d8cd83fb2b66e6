"""``MegatronActorRolloutRefWorker``: the policy worker with ``strategy=megatron`` (verl's Megatron worker API).

The RPC surface and DataProto contract are :class:`hybridrl.workers.actor_rollout_ref_worker.ActorRolloutRefWorker`'s
(``init_model``, ``generate_sequences``, ``compute_log_prob``, ``compute_ref_log_prob``, ``update_actor``); only
the builders differ: the actor and the reference are megatron-core models
(:mod:`hybridrl.workers.megatron.engine`), trained by :class:`MegatronPPOActor`, and the hybrid-engine rollout
receives the actor's weights as HF tensors gathered over TP (:func:`export_hf_weights`), verified as for FSDP.

Dispatch (verl 0.5's Megatron workers): the model-parallel groups are made in the constructor and each rank
registers its DP rank on the mesh ``"actor"``; ``compute_log_prob``, ``compute_ref_log_prob`` and
``update_actor`` split the batch over DP ranks, give every rank of a TP / CP / PP group the same slice and
collect from TP rank 0, CP rank 0 of the last stage (``make_nd_compute_dataproto_dispatch_fn``; megatron-core's DP
rank leaves CP out, so the ranks of a CP group register the same DP rank). ``generate_sequences`` keeps the FSDP
worker's ``DP_COMPUTE_PROTO``: each rank holds a whole rollout engine (hf, or vLLM at rollout TP 1). Per-rank batch
sizes count DP ranks (``world / (TP × PP × CP)``). Checkpoints: :mod:`hybridrl.workers.megatron.checkpoint`. Offload
(``actor.megatron.param_offload`` / ``grad_offload`` / ``optimizer_offload``, ``ref.megatron.param_offload``):
:mod:`hybridrl.workers.megatron.offload`, after the build and around each call, as verl's Megatron worker; the
rollout's weight sync brings the actor's params back for the sync only. Not implemented yet (it raises):
CP > 1 on CPU (written for the GPU, never run: :mod:`hybridrl.workers.megatron.context_parallel`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from omegaconf import OmegaConf

from hybridrl.config.batch_plan import PolicyWorkerPlan
from hybridrl.protocol import DataProto
from hybridrl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from hybridrl.workers.actor_rollout_ref_worker import ActorRolloutRefWorker
from hybridrl.workers.megatron.actor import MegatronOptimizerHandle, MegatronPPOActor
from hybridrl.workers.megatron.engine import (
    MegatronModel,
    build_megatron_lr_scheduler,
    build_megatron_model,
    build_megatron_optimizer,
    export_hf_weights,
)
from hybridrl.workers.megatron.offload import MegatronOffload, OffloadFlags
from hybridrl.workers.megatron.parallel import init_megatron_parallel, megatron_grid_exists

__all__ = ["MegatronActorRolloutRefWorker", "compute_dtype", "data_parallel_size", "model_parallel_size"]

_PARALLEL_KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
                  "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel")
MESH = "actor"  # the dispatch mesh of the actor's and the reference's data-parallel ranks


def model_parallel_size(megatron_config: Any) -> int:
    """Ranks that hold one copy of the model: ``TP × PP × CP``."""
    return (int(megatron_config.tensor_model_parallel_size) * int(megatron_config.pipeline_model_parallel_size)
            * int(megatron_config.context_parallel_size))


def data_parallel_size(world_size: int, megatron_config: Any, section: str) -> int:
    """Data-parallel ranks of a worker group of ``world_size`` ranks: ``world / (TP × PP × CP)``.

    Raises:
        ValueError: ``world_size`` is not a multiple of ``TP × PP × CP`` (``section``: the megatron section's path).
    """
    parallel = model_parallel_size(megatron_config)
    if world_size % parallel:
        raise ValueError(f"world size {world_size} is not a multiple of TP × PP × CP = {parallel} "
                         f"({section}.*_parallel_size)")
    return world_size // parallel


def compute_dtype(device_name: str) -> torch.dtype:
    """bf16 parameters on GPU (verl's Megatron workers); fp32 on CPU, where bf16 matmuls are slow and inexact."""
    return torch.bfloat16 if device_name == "cuda" else torch.float32


class MegatronActorRolloutRefWorker(ActorRolloutRefWorker):
    """Policy worker on megatron-core (same arguments as :class:`ActorRolloutRefWorker`)."""

    actor_class = MegatronPPOActor

    def __init__(self, config: Any, role: str, plan: PolicyWorkerPlan | None = None) -> None:
        super().__init__(config, role, plan)
        # a reference-only worker colocated with the actor's (the trainer's RefPolicy on the actor's pool) runs on the
        # grid the actor's worker made in this process, as in verl 0.5; alone it has its own ref.megatron layout
        self._on_actor_layout = self._is_actor or self._is_rollout or megatron_grid_exists()
        rank = init_megatron_parallel(self._megatron_section(), self._device_name)
        self._register_dispatch_collect_info(MESH, dp_rank=rank.dp_rank, is_collect=rank.is_collect_rank)

    def _megatron_section(self) -> Any:
        on_actor_layout = getattr(self, "_on_actor_layout", self._is_actor or self._is_rollout)
        return self.config.actor.megatron if on_actor_layout else self.config.ref.megatron

    def _standalone_plan(self, world_size: int) -> PolicyWorkerPlan:
        """Per-rank sizes over the data-parallel ranks only (a TP group shares one slice of the batch). The batch plan
        divides the ranks by the actor's TP × PP × CP itself (strategy=megatron), as the driver's plan does; a
        reference-only worker on its own ``ref.megatron`` layout is planned as the group whose actor layout gives its dp."""
        section = "actor.megatron" if self._is_actor or self._is_rollout else "ref.megatron"
        dp_size = data_parallel_size(world_size, self._megatron_section(), f"actor_rollout_ref.{section}")
        return super()._standalone_plan(dp_size * model_parallel_size(self.config.actor.megatron))

    def _build_model(self, megatron_config: Any, trainable: bool, section: str = "actor") -> MegatronModel:
        if not hasattr(self, "hf_config"):
            from transformers import AutoConfig

            model_config = self.config.model
            trust = bool(model_config.trust_remote_code)
            self.hf_config = AutoConfig.from_pretrained(model_config.path, trust_remote_code=trust)
        return build_megatron_model(self.config.model.path, self.hf_config, megatron_config,
                                    compute_dtype(self._device_name), self._device_name, trainable=trainable,
                                    section=f"actor_rollout_ref.{section}.megatron")

    def _build_actor(self, use_remove_padding: bool) -> None:
        actor_config = self.config.actor
        self.actor_model = self._build_model(actor_config.megatron, trainable=self._is_actor)
        self.actor_module = self.actor_model.causal_lm
        if self._is_actor:
            optimizer = build_megatron_optimizer(self.actor_model, actor_config.optim, actor_config.megatron)
            self.actor_optimizer = MegatronOptimizerHandle(optimizer, self.actor_model)  # type: ignore[assignment]
            self.actor_lr_scheduler = build_megatron_lr_scheduler(
                optimizer, actor_config.optim, self.plan.total_training_steps
            )
        temperature = float(self.config.rollout.temperature)
        plan = dict(update=self.plan.actor, log_prob=self.plan.old_log_prob, temperature=temperature)
        offload = bool(self.config.model.enable_activation_offload)
        self.actor = self.actor_class(actor_config, self.actor_model, self.actor_optimizer,
                                      use_remove_padding=use_remove_padding, enable_activation_offload=offload, **plan)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Build tokenizer, actor (+ optimizer, LR scheduler), rollout handle and ref, as the role asks."""
        super().init_model()
        if self.rollout is not None:  # the rollout follows the Megatron actor: HF tensors gathered over TP
            self.rollout.state_dict_fn = lambda _module: export_hf_weights(self.actor_model)
            self.rollout.sync_context = self._actor_params_on_device
        if getattr(self, "actor_model", None) is not None:  # megatron.*_offload: off the device until the first call
            flags = OffloadFlags.of(self.config.actor.megatron)
            self._actor_offload = MegatronOffload(self.actor_model, self._megatron_optimizer(), flags)
            self._actor_offload.offload()

    def _actor_params_on_device(self) -> contextlib.AbstractContextManager[Any]:
        """Around the rollout's weight sync: with ``param_offload`` the actor's params are on the device for the
        whole sync only (the engine copies the last bucket after the export's iterator ends), as verl's sharding
        manager; a no-op otherwise."""
        offload = getattr(self, "_actor_offload", None)
        return offload.on_device(with_optimizer=False) if offload is not None else contextlib.nullcontext()

    def _build_ref(self, use_remove_padding: bool) -> None:
        ref_config = self.config.ref
        megatron_config = ref_config.megatron
        if self._on_actor_layout:  # verl: a reference in (or next to) the actor's worker uses the actor's layout
            layout = {key: self.config.actor.megatron[key] for key in _PARALLEL_KEYS}
            megatron_config = OmegaConf.merge(megatron_config, layout)
        ref_model = self._build_model(megatron_config, trainable=False, section="ref")
        self.ref_module = ref_model.causal_lm
        ref_flags = OffloadFlags(params=OffloadFlags.of(ref_config.megatron).params)  # ref.megatron.param_offload
        self._ref_offload = MegatronOffload(ref_model, None, ref_flags)
        self._ref_offload.offload()
        self.ref_policy = MegatronPPOActor(
            ref_config,
            ref_model,
            use_remove_padding=use_remove_padding,
            log_prob=self.plan.ref_log_prob,
            temperature=float(self.config.rollout.temperature),
        )

    # ------------------------------------------------------------------ RPC surface: DP slices shared by a TP group

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name=MESH))
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs [B, R]``, ``entropys [B, R]`` (the FSDP worker's, on this DP slice)."""
        return super().compute_log_prob(data)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name=MESH))
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob [B, R]`` (the FSDP worker's, on this DP slice; ``ref.megatron.param_offload``: the
        reference's params on the device for this call only)."""
        offload = getattr(self, "_ref_offload", None)
        with offload.on_device(with_optimizer=False) if offload is not None else contextlib.nullcontext():
            return super().compute_ref_log_prob(data)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name=MESH))
    def update_actor(self, data: DataProto) -> DataProto:
        """One PPO update on this DP slice; ``meta_info["metrics"]`` (the FSDP worker's)."""
        return super().update_actor(data)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """The FSDP worker's; with ``param_offload`` the actor's params come back for the weight sync only (the
        rollout's ``state_dict_fn``), as verl's Megatron sharding manager, not for the whole generation."""
        self._generating = True
        try:
            return super().generate_sequences(prompts)
        finally:
            self._generating = False

    # ------------------------------------------------------------------ offload (hybridrl.workers.megatron.offload)

    def _offload_actor(self, optimizer_too: bool) -> None:
        offload = getattr(self, "_actor_offload", None)
        if offload is not None:
            offload.offload(optimizer_too=optimizer_too)

    def _actor_on_device(self, with_optimizer: bool) -> Any:
        offload = getattr(self, "_actor_offload", None)
        if offload is None or getattr(self, "_generating", False):
            return contextlib.nullcontext()
        return offload.on_device(with_optimizer)

    # ------------------------------------------------------------------ checkpoints

    def _megatron_optimizer(self) -> Any:
        """megatron-core's optimizer inside the actor's :class:`MegatronOptimizerHandle` (None: no actor role)."""
        return getattr(self.actor_optimizer, "optimizer", None) if self._is_actor else None

    def _checkpoint_contents(self, key: str) -> list[str]:
        from hybridrl.workers.engine.checkpoint import checkpoint_contents

        return checkpoint_contents(self.config.actor.checkpoint, key)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, hdfs_path: str | None = None, global_step: int = 0,
                        max_ckpt_to_keep: int | None = None) -> None:
        """Save the actor (TP/PP shards, optimizer, LR scheduler, RNG) in verl's per-rank Megatron layout under
        ``local_path`` (:mod:`hybridrl.workers.megatron.checkpoint`); refused (DivergenceError) after a non-finite
        step, as the FSDP worker's."""
        from hybridrl.workers.megatron.checkpoint import save_megatron_checkpoint

        if hdfs_path is not None:
            raise NotImplementedError("hdfs_path is not supported; checkpoints are written to local_path only.")
        with self._actor_on_device(with_optimizer=True):
            if self._is_actor and self.actor.divergence_guard is not None:
                self.actor.divergence_guard.check_savable(self.actor_module)
            save_megatron_checkpoint(local_path, self.actor_model, self._megatron_optimizer(), self.actor_lr_scheduler,
                                     save_contents=self._checkpoint_contents("save_contents"), tokenizer=self.tokenizer,
                                     global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        """Restore the actor from ``local_path`` (None: no-op); the rollout re-syncs before the next generation.
        ``del_local_after_load`` is accepted for verl's signature and ignored (the folder is kept)."""
        from hybridrl.workers.megatron.checkpoint import load_megatron_checkpoint

        if local_path is None:
            return
        if hdfs_path is not None:
            raise NotImplementedError("hdfs_path is not supported; pass a local checkpoint folder.")
        with self._actor_on_device(with_optimizer=True):
            load_megatron_checkpoint(local_path, self.actor_model, self._megatron_optimizer(), self.actor_lr_scheduler,
                                     load_contents=self._checkpoint_contents("load_contents"))
        if self.rollout is not None:
            self.rollout.mark_weights_stale()
