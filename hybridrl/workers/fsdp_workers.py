"""The FSDP worker classes the trainer places in Ray worker groups (verl's ``verl.workers.fsdp_workers``).

Each is a thin RPC surface over the engine, the actor/critic and the rollout:

- :class:`ActorRolloutRefWorker` (``actor_rollout_ref_worker.py``): roles ``actor``, ``rollout``, ``ref``,
  ``actor_rollout``, ``actor_rollout_ref``; ``init_model``, ``generate_sequences``, ``compute_log_prob``,
  ``compute_ref_log_prob``, ``update_actor``, ``save_checkpoint``, ``load_checkpoint``.
- :class:`AsyncActorRolloutRefWorker` (``async_actor_rollout_ref_worker.py``): the same plus the rollout server
  methods ``wake_up``, ``generate``, ``sleep`` of ``rollout.mode=async``.
- :class:`CriticWorker` (``critic_worker.py``): ``init_model``, ``compute_values``, ``update_critic``,
  ``save_checkpoint``, ``load_checkpoint``.
- :class:`RewardModelWorker` (``reward_model_worker.py``): ``init_model``, ``compute_rm_score``.

``init_model``/``save_checkpoint``/``load_checkpoint`` are ``Dispatch.ONE_TO_ALL``; the data methods are
``Dispatch.DP_COMPUTE_PROTO`` (the batch is chunked over ranks, outputs concatenated), as in verl 0.5.
"""

from hybridrl.workers.actor_rollout_ref_worker import ActorRolloutRefWorker
from hybridrl.workers.async_actor_rollout_ref_worker import AsyncActorRolloutRefWorker
from hybridrl.workers.critic_worker import CriticWorker
from hybridrl.workers.reward_model_worker import RewardModelWorker

__all__ = ["ActorRolloutRefWorker", "AsyncActorRolloutRefWorker", "CriticWorker", "RewardModelWorker"]
