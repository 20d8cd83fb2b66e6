"""PPO actors: the interface and the data-parallel (FSDP / plain module) implementation."""

from hybridrl.workers.actor.base import BasePPOActor
from hybridrl.workers.actor.dp_actor import DataParallelPPOActor

__all__ = ["BasePPOActor", "DataParallelPPOActor"]
