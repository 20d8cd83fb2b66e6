"""Backend-independent single-controller pieces: workers, worker groups, resource pools."""

from hybridrl.single_controller.base.worker import Worker
from hybridrl.single_controller.base.worker_group import ClassWithInitArgs, ResourcePool, WorkerGroup

__all__ = ["Worker", "WorkerGroup", "ResourcePool", "ClassWithInitArgs"]
