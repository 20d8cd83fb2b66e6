"""Reward managers by name (``reward_model.reward_manager``): ``naive``, ``batch``, ``dapo``, ``prime``."""

from hybridrl.workers.reward_manager.abstract import AbstractRewardManager, RewardFunctionError
from hybridrl.workers.reward_manager.batch import BatchRewardManager
from hybridrl.workers.reward_manager.dapo import DAPORewardManager
from hybridrl.workers.reward_manager.naive import NaiveRewardManager
from hybridrl.workers.reward_manager.prime import PrimeRewardManager
from hybridrl.workers.reward_manager.registry import REWARD_MANAGER_REGISTRY, get_reward_manager_cls, register

__all__ = [
    "AbstractRewardManager",
    "BatchRewardManager",
    "DAPORewardManager",
    "NaiveRewardManager",
    "PrimeRewardManager",
    "REWARD_MANAGER_REGISTRY",
    "RewardFunctionError",
    "get_reward_manager_cls",
    "register",
]
