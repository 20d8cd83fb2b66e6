"""Train → rollout weight sync (the hybrid engine): ``RolloutHandle`` and its helpers."""

from hybridrl.workers.sharding_manager.hybrid_engine import RolloutHandle
from hybridrl.workers.sharding_manager.weight_sync import (
    WeightSyncError,
    iter_buckets,
    iter_full_state_dict,
    sample_indices,
)

__all__ = ["RolloutHandle", "WeightSyncError", "iter_buckets", "iter_full_state_dict", "sample_indices"]
