"""``RayClassWithInitArgs``: a Ray actor class, its constructor arguments and its placement options.

A worker group calls it once per rank to start that rank's actor in a placement-group bundle.
``user_class`` and ``actor_class_name`` see through ``ray.remote`` to the user's Python class.
"""

from __future__ import annotations

import re
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from hybridrl.single_controller.base.worker_group import ClassWithInitArgs

__all__ = ["RayClassWithInitArgs", "actor_class_name", "user_class"]

RAY_ACTOR_DEFAULT_NUM_CPUS = 1  # what Ray gives an actor that names no num_cpus


class RayClassWithInitArgs(ClassWithInitArgs):
    """A ``ray.remote`` class plus its constructor arguments and actor options."""

    def __init__(self, cls: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(cls, *args, **kwargs)
        self._options: dict[str, Any] = {}
        self._additional_resource: dict[str, Any] = {}

    def set_additional_resource(self, additional_resource: dict[str, Any]) -> None:
        self._additional_resource = dict(additional_resource)

    def update_options(self, options: dict[str, Any]) -> None:
        self._options.update(options)

    def num_cpus_per_actor(self) -> float:
        """CPUs each actor asks of its bundle (Ray's default for actors is 1)."""
        for source in (self._options, self._additional_resource):
            if "num_cpus" in source:
                return float(source["num_cpus"])
        return float(RAY_ACTOR_DEFAULT_NUM_CPUS)

    def __call__(  # type: ignore[override]  # verl's signature: placement arguments
        self,
        placement_group: Any,
        placement_group_bundle_idx: int,
        use_gpu: bool = True,
        num_gpus: float = 1,
        sharing_with: Any = None,
        device_name: str = "cuda",
    ) -> Any:
        """Start one actor in bundle ``placement_group_bundle_idx`` (or beside ``sharing_with``)."""
        if sharing_with is not None:
            node_id = ray.get(sharing_with.get_node_id.remote())
            visible = ray.get(sharing_with.get_cuda_visible_devices.remote())
            strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
            return self.cls.options(scheduling_strategy=strategy).remote(
                *self.args, cuda_visible_devices=visible, **self.kwargs
            )
        options: dict[str, Any] = {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=placement_group_bundle_idx
            )
        }
        options.update(self._options)
        if use_gpu and device_name == "cuda":
            options["num_gpus"] = num_gpus
        elif use_gpu and device_name == "npu":
            options["resources"] = {"NPU": num_gpus}
        options.update(self._additional_resource)
        return self.cls.options(**options).remote(*self.args, **self.kwargs)


def actor_class_name(remote_cls: Any) -> str:
    """``ray.remote(Foo)`` → ``"Foo"``."""
    actor_cls = getattr(remote_cls, "__ray_actor_class__", None)
    if actor_cls is not None:
        return actor_cls.__name__
    match = re.search(r"ActorClass\(([^)]+)\)", type(remote_cls).__name__)
    return match.group(1) if match else type(remote_cls).__name__


def user_class(remote_cls: Any) -> type:
    """The Python class behind ``ray.remote(cls)`` (or ``cls`` itself)."""
    return getattr(remote_cls, "__ray_actor_class__", remote_cls)
