"""verl 0.9's reward loop (``verl.experimental.reward_loop``): async per-sample reward managers and the reward
workers that run them; see :mod:`hybridrl.experimental.reward_loop.reward_loop`."""

from hybridrl.experimental.reward_loop.reward_loop import RewardLoopManager, RewardLoopWorker

__all__ = ["RewardLoopManager", "RewardLoopWorker"]
