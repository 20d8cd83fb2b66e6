"""Worker groups on Ray: resource pools (placement groups), actors, colocation of roles."""

from hybridrl.single_controller.ray.base import (
    RayClassWithInitArgs,
    RayWorkerGroup,
    create_colocated_worker_cls,
    create_colocated_worker_cls_fused,
    create_colocated_worker_raw_cls,
)
from hybridrl.single_controller.ray.errors import ResourceUnavailableError, WorkerGroupError
from hybridrl.single_controller.ray.resource_pool import RayResourcePool, sort_placement_group_by_node_ip

__all__ = [
    "RayWorkerGroup",
    "RayResourcePool",
    "RayClassWithInitArgs",
    "create_colocated_worker_cls",
    "create_colocated_worker_cls_fused",
    "create_colocated_worker_raw_cls",
    "WorkerGroupError",
    "ResourceUnavailableError",
    "sort_placement_group_by_node_ip",
]
