"""Colocation: several roles (actor, rollout, ref, critic ...) inside one Ray actor process.

``create_colocated_worker_cls({"actor_rollout": RayClassWithInitArgs(...), "critic": ...})``
builds a ``WorkerDict`` actor class that constructs every role's worker in-process and exposes
each registered method ``m`` of role ``r`` as ``r_m`` (same dispatch attributes). One
``RayWorkerGroup`` over it, then ``wg.spawn(prefix_set=roles)``, gives one view per role whose
methods are rebound to their plain names. The roles share the process (and device) but not their
state; each forms its own process group if it needs one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import ray

from hybridrl.single_controller.base.decorator import MAGIC_ATTR, Dispatch
from hybridrl.single_controller.base.worker import Worker
from hybridrl.single_controller.base.worker_group import registered_methods
from hybridrl.single_controller.ray.actor_class import RayClassWithInitArgs, user_class


def _forwarder(role: str, method_name: str, method: Callable) -> Callable:
    """``WorkerDict.{role}_{method_name}`` → ``self.worker_dict[role].{method_name}`` (sync or async)."""
    if inspect.iscoroutinefunction(method):

        async def forward_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await getattr(self.worker_dict[role], method_name)(*args, **kwargs)

        forward: Callable = forward_async
    else:

        def forward_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(self.worker_dict[role], method_name)(*args, **kwargs)

        forward = forward_sync
    forward.__name__ = forward.__qualname__ = f"{role}_{method_name}"
    forward.__doc__ = method.__doc__
    setattr(forward, MAGIC_ATTR, getattr(method, MAGIC_ATTR))
    return forward


def create_colocated_worker_cls(class_dict: dict[str, RayClassWithInitArgs]) -> RayClassWithInitArgs:
    """A remote ``WorkerDict`` class hosting every role of ``class_dict`` in one process.

    Args:
        class_dict: role name → that role's worker class (``ray.remote``-ed or plain) and arguments.

    Returns:
        ``RayClassWithInitArgs`` of the combined class; methods are exposed as ``{role}_{method}``,
        and ``WorkerDict.role_methods`` lists each role's methods (used by ``spawn``).
    """
    classes = {role: user_class(spec.cls) for role, spec in class_dict.items()}
    init_args = {role: (spec.args, spec.kwargs) for role, spec in class_dict.items()}
    for role, cls in classes.items():
        if not issubclass(cls, Worker):
            raise TypeError(f"role '{role}': {cls.__name__} must subclass hybridrl.single_controller.base.Worker")

    class WorkerDict(Worker):
        role_methods: dict[str, list[str]] = {}

        def __init__(self) -> None:
            super().__init__()
            # every role is a full Worker: it reads the same rank / master address environment
            self.worker_dict = {role: cls(*init_args[role][0], **init_args[role][1]) for role, cls in classes.items()}

    for role, cls in classes.items():
        names = []
        for method_name, attrs in registered_methods(cls).items():
            method = getattr(cls, method_name)
            if attrs["dispatch_mode"] is Dispatch.DIRECT_ROLLOUT_METHOD:
                setattr(WorkerDict, method_name, _forwarder(role, method_name, method))  # engine-facing, unprefixed
                continue
            setattr(WorkerDict, f"{role}_{method_name}", _forwarder(role, method_name, method))
            names.append(method_name)
        WorkerDict.role_methods[role] = names
    return RayClassWithInitArgs(ray.remote(WorkerDict))
