"""``MegatronRewardModelWorker``: the reward model's worker with ``reward_model.strategy=megatron`` (forward only).

The RPC surface and DataProto contract are :class:`hybridrl.workers.reward_model_worker.RewardModelWorker`'s::

    compute_rm_score  input_ids, responses, attention_mask, position_ids (+ raw_prompt) → rm_scores [B, R]

(the RM's output at each sequence's last valid token, placed on the last valid response token; the chat-template
switch when ``reward_model.model.input_tokenizer`` differs). Only the model differs: a frozen megatron-core value
model (:mod:`hybridrl.workers.megatron.value_model`; the folder's ``score`` head, e.g. of a
``*ForSequenceClassification`` RM with one label) on the ``reward_model.megatron`` layout.

Dispatch (verl 0.5's Megatron workers): each rank registers its DP rank on the mesh ``"reward_model"``;
``compute_rm_score`` splits the batch over DP ranks, gives every rank of a TP (and CP) group the same slice and
collects from TP rank 0, CP rank 0. Per-rank micro-batches count DP ranks (``world / (TP × PP × CP)``).
``reward_model.megatron.param_offload``: the params are on the device during ``compute_rm_score`` only
(:mod:`hybridrl.workers.megatron.offload`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from hybridrl.config.batch_plan import ForwardPlan
from hybridrl.protocol import DataProto
from hybridrl.single_controller.base.decorator import make_nd_compute_dataproto_dispatch_fn, register
from hybridrl.workers.megatron.offload import MegatronOffload, OffloadFlags
from hybridrl.workers.megatron.parallel import init_megatron_parallel
from hybridrl.workers.megatron.value_model import build_value_model
from hybridrl.workers.megatron.worker import data_parallel_size
from hybridrl.workers.reward_model_worker import RewardModelWorker

__all__ = ["MegatronRewardModelWorker"]

MESH = "reward_model"  # the dispatch mesh of the reward model's data-parallel ranks


class MegatronRewardModelWorker(RewardModelWorker):
    """Reward-model worker on megatron-core (same arguments as :class:`RewardModelWorker`: the ``reward_model``
    section of ``ppo_megatron_trainer.yaml`` and the driver's :class:`ForwardPlan` of the scoring pass, or None)."""

    def __init__(self, config: Any, plan: ForwardPlan | None = None) -> None:
        super().__init__(config, plan)
        rank = init_megatron_parallel(self.config.megatron, self._device_name)
        self._register_dispatch_collect_info(MESH, dp_rank=rank.dp_rank, is_collect=rank.is_collect_rank)

    def _standalone_plan(self, world_size: int) -> ForwardPlan:
        """Micro-batching over the data-parallel ranks only (a TP group shares one slice of the batch): the batch plan
        divides the ranks by ``reward_model.megatron``'s TP × PP × CP itself (reward_model.strategy=megatron)."""
        data_parallel_size(world_size, self.config.megatron, "reward_model.megatron")  # raises when TP × PP × CP ∤ ranks
        return super()._standalone_plan(world_size)

    def _build_reward_module(self) -> nn.Module:
        """The frozen value view: ``module(input_ids, attention_mask, position_ids).logits [B, S, 1]``."""
        self.reward_model = build_value_model(self.config.model, self.config.megatron, "reward_model.megatron",
                                              self._device_name, trainable=False)
        flags = OffloadFlags(params=OffloadFlags.of(self.config.megatron).params)
        self._offload = MegatronOffload(self.reward_model, None, flags)
        self._offload.offload()
        return self.reward_model.causal_lm

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name=MESH))
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores [B, R]`` (the FSDP worker's, on this DP slice)."""
        with self._offload.on_device(with_optimizer=False):
            return super().compute_rm_score(data)
