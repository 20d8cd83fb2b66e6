"""verl 0.9's reward-loop managers: ``naive``, ``dapo``, ``rate_limited`` (alias ``limit``), ``remote``."""

from hybridrl.experimental.reward_loop.reward_manager.registry import get_reward_manager_cls, register  # noqa: I001
from hybridrl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from hybridrl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager
from hybridrl.experimental.reward_loop.reward_manager.limited import RateLimitedRewardManager
from hybridrl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from hybridrl.experimental.reward_loop.reward_manager.remote import RemoteRewardManager

__all__ = [
    "DAPORewardManager",
    "NaiveRewardManager",
    "RateLimitedRewardManager",
    "RemoteRewardManager",
    "RewardManagerBase",
    "get_reward_manager_cls",
    "register",
]
