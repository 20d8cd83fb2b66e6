"""The seams of the PPO trainer, typed: what the driver calls on each worker group and on the reward manager.

    driver                       group protocol . method                   adds (B rows, P prompt, R response)
    ──────────────────────────   ──────────────────────────────────────    ────────────────────────────────────
    stages.generate          ─►  RolloutGroup.generate_sequences           responses [B, R], input_ids [B, P+R]
    stages.reward            ─►  RewardModelGroup.compute_rm_score         rm_scores [B, R]
    stages.old_log_prob      ─►  ActorRolloutGroup.compute_log_prob        old_log_probs [B, R] (+ sum_pi_squared)
    stages.ref_log_prob      ─►  RefGroup.compute_ref_log_prob             ref_log_prob [B, R]
    stages.values            ─►  CriticGroup.compute_values                values [B, R]
    stages.update_critic     ─►  CriticGroup.update_critic                 meta_info["metrics"]
    stages.update_actor      ─►  ActorRolloutGroup.update_actor            meta_info["metrics"]
    Checkpointer             ─►  CheckpointedGroup.save/load_checkpoint    (files in verl's layout)

Every data method takes one DataProto and returns one (``Dispatch.DP_COMPUTE_PROTO`` splits the rows over the
ranks and concatenates the outputs). The real groups are ``RayWorkerGroup`` instances whose methods are bound at
spawn time from the worker class, and the tests pass fake groups: both match these Protocols structurally,
nothing inherits from them and nothing checks them at runtime (hence no ``runtime_checkable``).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from hybridrl.protocol import DataProto, DataProtoFuture

__all__ = [
    "ActorRolloutGroup",
    "CheckpointedGroup",
    "CriticGroup",
    "NonBlockingRolloutGroup",
    "RefGroup",
    "RewardManager",
    "RewardModelGroup",
    "RolloutGroup",
    "WeightPublisherGroup",
    "WeightReceiverGroup",
]


class RolloutGroup(Protocol):
    """What generates: the actor's group (hybrid engine), the rollout's own group, or the agent-loop manager."""

    @property
    def world_size(self) -> int:  # ranks; generation batches are padded to a multiple of it
        ...

    def generate_sequences(self, prompts: DataProto) -> DataProto: ...


class NonBlockingRolloutGroup(RolloutGroup, Protocol):
    """A worker group whose generation can be enqueued without waiting (the async trainer modes)."""

    def generate_sequences_nonblocking(self, prompts: DataProto) -> DataProtoFuture: ...


class CheckpointedGroup(Protocol):
    """A group whose model, optimizer, LR scheduler and RNG states are saved in verl's layout (one result a rank)."""

    def save_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, global_step: int = 0, max_ckpt_to_keep: int | None = None
    ) -> object: ...

    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> object: ...


class RefGroup(Protocol):
    """What answers the reference log-probs: a group of its own, or the actor's group (reference in its process)."""

    def compute_ref_log_prob(self, data: DataProto) -> DataProto: ...


class ActorRolloutGroup(RolloutGroup, RefGroup, CheckpointedGroup, Protocol):
    """The policy: generation (hybrid engine), old log-probs, the PPO update; the reference when colocated."""

    def compute_log_prob(self, data: DataProto) -> DataProto: ...

    def update_actor(self, data: DataProto) -> DataProto: ...


class CriticGroup(CheckpointedGroup, Protocol):
    """The value model."""

    def compute_values(self, data: DataProto) -> DataProto: ...

    def update_critic(self, data: DataProto) -> DataProto: ...


class RewardModelGroup(Protocol):
    """A model-based reward (``reward_model.enable``): scores whole responses."""

    def compute_rm_score(self, data: DataProto) -> DataProto: ...


class WeightPublisherGroup(Protocol):
    """separate_async: the actor's ranks publish their weights (one ``WeightPackage`` or None a rank)."""

    def publish_weights(self, version: int) -> list[object]: ...


class WeightReceiverGroup(Protocol):
    """separate_async: the rollout's ranks load a published package (Ray object refs of their metrics)."""

    def receive_weights(self, package: object) -> object: ...


class RewardManager(Protocol):
    """A reward manager (``naive``, ``batch``, ``dapo``, ``prime`` or a custom one): token-level scores ``[B, R]``,
    or with ``return_dict=True`` ``{"reward_tensor": [B, R], "reward_extra_info": {name: [B] values}}``."""

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]: ...
