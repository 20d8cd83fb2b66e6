"""``DPOActorRolloutRefWorker``: the policy worker with a DPO update and a reference refresh.

Adds two endpoints to :class:`~hybridrl.workers.fsdp_workers.ActorRolloutRefWorker` (role ``actor_rollout_ref``:
actor, rollout and reference in one process, as the DPO trainers map it):

    update_actor_dpo      pair batch (chosen, rejected, … rows) + ref_log_prob  → meta_info["metrics"]
    sync_ref_from_actor   copy the actor's weights into the reference (SPIN's next iteration; ref_update_freq)
"""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.protocol import DataProto
from hybridrl.recipes.online_dpo.dpo_actor import DataParallelDPOActor
from hybridrl.single_controller.base.decorator import Dispatch, register
from hybridrl.utils.device import current_device, memory_metrics
from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

__all__ = ["DPOActorRolloutRefWorker"]


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The rank's shard of an FSDP2 DTensor parameter (the tensor itself otherwise)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


class DPOActorRolloutRefWorker(ActorRolloutRefWorker):
    """Policy worker for online DPO and SPIN (verl's SPIN recipe worker, on the PPO worker's RPC surface)."""

    # same module and optimizer, a DPO update on top of the PPO actor's forward and micro-batching
    actor_class = DataParallelDPOActor

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor_dpo(self, data: DataProto) -> DataProto:
        """One DPO update on this rank's pairs; returns ``meta_info["metrics"]`` and steps the LR schedule.

        ``data.meta_info`` carries ``dpo_num_pairs`` (real pairs over all ranks) and the ``dpo_*``
        hyper-parameters; each rank's chunk must hold whole pairs (the trainer pads to a multiple of the
        world size).
        """
        if not self._is_actor:
            raise RuntimeError(f"update_actor_dpo needs an actor role; this worker has role={self.role!r}.")
        data = data.to(current_device())
        num_pairs_per_rank = float(data.meta_info["dpo_num_pairs"]) / self.world_size
        with self._actor_on_device(with_optimizer=True):
            assert isinstance(self.actor, DataParallelDPOActor)  # set by _build_actor
            metrics: dict[str, Any] = self.actor.update_policy_dpo(data, num_pairs_per_rank)
            metrics.update(memory_metrics())
            metrics["actor/lr"] = self.actor_lr_scheduler.get_last_lr()[0]
            self.actor_lr_scheduler.step()
        if self.rollout is not None:
            self.rollout.mark_weights_stale()
        return DataProto(meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sync_ref_from_actor(self) -> None:
        """Copy the actor's weights into the reference policy, shard by shard (same model, same sharding)."""
        if not (self._is_actor and self._is_ref):
            raise RuntimeError(f"sync_ref_from_actor needs role actor_rollout_ref; this worker has role={self.role!r}.")
        actor_params = dict(self.actor_module.named_parameters())
        ref_params = dict(self.ref_module.named_parameters())
        if actor_params.keys() != ref_params.keys():
            raise RuntimeError("sync_ref_from_actor: actor and reference parameters differ (different wrapping?)")
        with self._actor_on_device(with_optimizer=False), torch.no_grad():
            for name, ref_param in ref_params.items():
                source, target = _local(actor_params[name].data), _local(ref_param.data)
                if source.shape != target.shape:
                    raise RuntimeError(
                        f"sync_ref_from_actor: {name} is sharded differently ({tuple(source.shape)} vs "
                        f"{tuple(target.shape)}); give actor and ref the same fsdp_config"
                    )
                target.copy_(source)
