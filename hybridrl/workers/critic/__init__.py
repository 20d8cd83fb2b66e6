"""PPO critics: the interface and the data-parallel (FSDP / plain module) implementation."""

from hybridrl.workers.critic.base import BasePPOCritic
from hybridrl.workers.critic.dp_critic import DataParallelPPOCritic

__all__ = ["BasePPOCritic", "DataParallelPPOCritic"]
