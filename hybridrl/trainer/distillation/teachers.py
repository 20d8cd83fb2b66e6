"""Teachers of on-policy distillation: frozen models scoring the student's sampled tokens (verl 0.9's teacher
models), spawned on their own pool and routed per sample.

    distillation_pool ([distillation.n_gpus_per_node] * distillation.nnodes processes)
      └─ one colocated worker group: a reference-policy worker (ActorRolloutRefWorker, role "ref") per teacher,
         its model at distillation.teacher_models.<name>.model_path; every teacher spans the whole pool

    batch ─► rows by batch.non_tensor_batch[distillation.teacher_key] ─► each teacher's compute_ref_log_prob
          ─► teacher_logprobs [B, R] (+ meta_info["distillation"]: the loss settings the actor reads)
             (+ teacher_topk_logprobs, teacher_topk_ids [B, R, K] with loss_mode=forward_kl_topk, K = topk)

A teacher is the reference policy's machinery with another model: the same FSDP forward, micro-batches
(``actor_rollout_ref.ref.log_prob_*``) and temperature (``inference.temperature``, default the rollout's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from hybridrl.config.checks_distillation import SINGLE_TEACHER_KEY, TeacherSpec, teacher_specs
from hybridrl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, create_colocated_worker_cls
from hybridrl.trainer.ppo.stages import Metrics, timed
from hybridrl.workers.actor.distillation_update import (
    DISTILLATION_META_KEY,
    TEACHER_LOG_PROBS_KEY,
    TEACHER_TOPK_IDS_KEY,
    TEACHER_TOPK_LOG_PROBS_KEY,
    TEACHER_TOPK_META_KEY,
    DistillationLossParams,
)

__all__ = ["DISTILLATION_POOL", "Teachers", "spawn_teachers", "teacher_section"]

DISTILLATION_POOL = "distillation_pool"


def teacher_section(config: DictConfig, spec: TeacherSpec) -> DictConfig:
    """The ``actor_rollout_ref`` section a teacher's reference worker is built from: the student's, with the
    teacher's model folder, no LoRA, and the teacher's ``inference.temperature`` when it has one."""
    section = OmegaConf.create(OmegaConf.to_container(config.actor_rollout_ref, resolve=True))
    assert isinstance(section, DictConfig)
    entry = config.distillation.teacher_models[spec.name]
    temperature = OmegaConf.select(entry, "inference.temperature", default=None)
    with open_dict(section):
        section.model.path = spec.model_path
        section.model.lora_rank = 0
        if temperature is not None:
            section.rollout.temperature = float(temperature)
    return section


@dataclass(frozen=True)
class Teachers:
    """The teachers' worker groups by the key they score, and what the actor's update needs from the config."""

    groups: dict[str, Any]  # key → worker group answering compute_ref_log_prob
    teacher_key: str  # distillation.teacher_key: the non-tensor field routing each sample
    params: DistillationLossParams

    def score(self, batch: DataProto) -> tuple[DataProto, Metrics]:
        """Add ``teacher_logprobs [B, R]`` (each row scored by its teacher) and the loss settings to ``batch``; with
        the top-k loss also ``teacher_topk_logprobs, teacher_topk_ids [B, R, K]``."""
        metrics: Metrics = {}
        assert batch.batch is not None, "the teachers score a batch with responses"
        topk = self.params.topk if self.params.uses_topk else 0
        with timed("teacher_log_prob", metrics):
            responses = batch.batch["responses"]
            scored_keys = {TEACHER_LOG_PROBS_KEY: torch.zeros_like(responses, dtype=torch.float32)}
            if topk:
                scored_keys[TEACHER_TOPK_LOG_PROBS_KEY] = torch.zeros(*responses.shape, topk, dtype=torch.float32)
                scored_keys[TEACHER_TOPK_IDS_KEY] = torch.zeros(*responses.shape, topk, dtype=torch.long)
            for key, rows in self._rows_by_teacher(batch).items():
                part, pad = pad_dataproto_to_divisor(batch.select_idxs(rows), self.groups[key].world_size)
                if topk:
                    part.meta_info[TEACHER_TOPK_META_KEY] = topk
                output = unpad_dataproto(self.groups[key].compute_ref_log_prob(part), pad)
                assert output.batch is not None
                index = torch.as_tensor(rows)
                scored_keys[TEACHER_LOG_PROBS_KEY][index] = output.batch["ref_log_prob"].float()
                if topk:
                    scored_keys[TEACHER_TOPK_LOG_PROBS_KEY][index] = output.batch["topk_log_probs"].float()
                    scored_keys[TEACHER_TOPK_IDS_KEY][index] = output.batch["topk_ids"].long()
        tensors = batch.batch.clone(recurse=False)
        for name, values in scored_keys.items():
            tensors[name] = values
        scored = DataProto(batch=tensors, non_tensor_batch=dict(batch.non_tensor_batch),
                           meta_info={**batch.meta_info, DISTILLATION_META_KEY: self.params})
        return scored, metrics

    def _rows_by_teacher(self, batch: DataProto) -> dict[str, np.ndarray]:
        if list(self.groups) == [SINGLE_TEACHER_KEY]:
            return {SINGLE_TEACHER_KEY: np.arange(len(batch))}
        if self.teacher_key not in batch.non_tensor_batch:
            raise KeyError(f"distillation.teacher_key={self.teacher_key!r} is not a field of the batch (it has "
                           f"{sorted(batch.non_tensor_batch)}); set it to the field that names each sample's teacher")
        values = np.asarray([str(value) for value in batch.non_tensor_batch[self.teacher_key]])
        unknown = sorted(str(value) for value in set(values) - set(self.groups))
        if unknown:
            raise ValueError(f"samples with {self.teacher_key}={unknown} have no teacher: the teachers' keys are "
                             f"{sorted(self.groups)} (distillation.teacher_models.<name>.key)")
        return {key: np.flatnonzero(values == key) for key in self.groups if (values == key).any()}


def spawn_teachers(config: DictConfig, pools: dict[str, RayResourcePool], ray_worker_group_cls: type,
                   device_name: str, plan: Any) -> Teachers:
    """One colocated worker group on :data:`DISTILLATION_POOL` holding a reference worker per teacher, each
    ``init_model``-ed.

    Args:
        pools: the created resource pools by name (``ResourcePoolManager.resource_pool_dict``).
        plan: the policy workers' batch plan (its ``ref_log_prob`` micro-batches serve the teachers).
    """
    import ray

    from hybridrl.config.worker_classes import import_worker_class

    if DISTILLATION_POOL not in pools:
        raise ValueError(f"distillation.enabled=True needs a resource pool named {DISTILLATION_POOL!r} (main_ppo "
                         f"adds it: [distillation.n_gpus_per_node] * distillation.nnodes); pools: {sorted(pools)}")
    pool = pools[DISTILLATION_POOL]
    worker_cls = ray.remote(import_worker_class(config.actor_rollout_ref.actor.strategy, "policy",
                                                "actor_rollout_ref.actor.strategy"))
    specs = teacher_specs(config)
    class_dict = {
        f"teacher_{index}": RayClassWithInitArgs(cls=worker_cls, config=teacher_section(config, spec), role="ref",
                                                 plan=plan)
        for index, spec in enumerate(specs)
    }
    group = ray_worker_group_cls(resource_pool=pool, ray_cls_with_init=create_colocated_worker_cls(class_dict),
                                 device_name=device_name)
    spawned = group.spawn(prefix_set=class_dict.keys())
    print(f"[trainer] {DISTILLATION_POOL}: {', '.join(spec.name for spec in specs)} on {group.world_size} rank(s)",
          flush=True)
    groups = {}
    for index, spec in enumerate(specs):
        spawned[f"teacher_{index}"].init_model()
        groups[spec.key] = spawned[f"teacher_{index}"]
    params = DistillationLossParams.from_config(config.distillation.distillation_loss)
    return Teachers(groups=groups, teacher_key=str(config.distillation.teacher_key), params=params)
