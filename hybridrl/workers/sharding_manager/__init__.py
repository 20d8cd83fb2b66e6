"""Train → rollout weight sync (the hybrid engine): ``RolloutHandle``, its builder and helpers.

The sharding manager drives the rollout engines (``hybridrl.workers.rollout``), never the other way round.
"""

from hybridrl.workers.sharding_manager.hybrid_engine import RolloutHandle, build_rollout_handle
from hybridrl.workers.sharding_manager.weight_sync import (
    WeightSyncError,
    iter_buckets,
    iter_full_state_dict,
    sample_indices,
)

__all__ = [
    "RolloutHandle",
    "WeightSyncError",
    "build_rollout_handle",
    "iter_buckets",
    "iter_full_state_dict",
    "sample_indices",
]
