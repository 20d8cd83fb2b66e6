"""Fused workers: several roles inside one Ray actor, each role's worker reachable by name (verl 0.5).

The second colocation mechanism next to ``create_colocated_worker_cls`` (``colocate.py``). Instead of
copying every role's methods onto one class under ``{role}_{method}`` names, the fused class keeps the
role workers as they are and routes by name::

    create_colocated_worker_raw_cls({"actor": RayClassWithInitArgs(Actor), "critic": ...})
        -> class FusedWorker_actor_critic(Worker)
             .fused_worker_dict = {"actor": Actor(...), "critic": Critic(...)}   (also .actor, .critic)
             ._fuw_execute("critic_fwmn_update", *args)  ->  self.fused_worker_dict["critic"].update(*args)

    create_colocated_worker_cls_fused(class_dict)  ->  RayClassWithInitArgs(ray.remote(that class)),
        fused_worker_used=True: a RayWorkerGroup over it ``spawn``s one view per role whose calls go
        through ``_fuw_execute`` ("fwmn": fused worker method name).

Each role worker also gets ``fused_worker_dict``, so a role can reach its siblings in the same process
(``self.get_fused_worker_by_name("critic")``).
"""

from __future__ import annotations

from typing import Any

import ray

from hybridrl.single_controller.base.worker import Worker
from hybridrl.single_controller.ray.actor_class import RayClassWithInitArgs, user_class

__all__ = [
    "FUSED_METHOD_SEPARATOR",
    "FusedWorkerCLSName",
    "create_colocated_worker_cls_fused",
    "create_colocated_worker_raw_cls",
]

FusedWorkerCLSName = "FusedWorker"
# "{role}{FUSED_METHOD_SEPARATOR}{method}" is the first argument of _fuw_execute
FUSED_METHOD_SEPARATOR = "_fwmn_"


def create_colocated_worker_raw_cls(class_dict: dict[str, RayClassWithInitArgs]) -> type:
    """A plain ``Worker`` subclass, ``FusedWorker_{role1}_{role2}...``, that builds every role's worker.

    Args:
        class_dict: role name -> that role's worker class (``ray.remote``-ed or plain) and arguments.

    Returns:
        The class (not ``ray.remote``-ed). Class attributes: ``is_fused_worker = True`` and
        ``raw_cls_dict`` (role -> user class). Instances: ``fused_worker_dict`` (role -> worker),
        one attribute per role, and ``_fuw_execute(f"{role}_fwmn_{method}", *args, **kwargs)``.
    """
    raw_cls_dict = {role: user_class(spec.cls) for role, spec in class_dict.items()}
    init_args = {role: (spec.args, spec.kwargs) for role, spec in class_dict.items()}
    for role, cls in raw_cls_dict.items():
        if not issubclass(cls, Worker):
            raise TypeError(f"role '{role}': {cls.__name__} must subclass hybridrl.single_controller.base.Worker")
    class_name = "_".join([FusedWorkerCLSName, *raw_cls_dict])

    def __init__(self: Worker, *args: Any, **kwargs: Any) -> None:
        Worker.__init__(self, *args, **kwargs)
        self.cls_names = list(raw_cls_dict)
        self.raw_cls_dict = raw_cls_dict
        for role, cls in raw_cls_dict.items():
            role_args, role_kwargs = init_args[role]
            # every role is a full Worker: it reads the same rank / master address environment
            self.fused_worker_dict[role] = cls(*role_args, **role_kwargs)
            setattr(self, role, self.fused_worker_dict[role])
        for worker in self.fused_worker_dict.values():  # siblings see each other
            setattr(worker, Worker.fused_worker_attr_name, self.fused_worker_dict)

    def _fuw_execute(self: Worker, method_name: str, *args: Any, **kwargs: Any) -> Any:
        role, _, method = method_name.partition(FUSED_METHOD_SEPARATOR)
        if role not in self.fused_worker_dict:
            raise KeyError(
                f"calling {role}'s {method}, but {role} not in fused_worker_dict (roles: {list(self.fused_worker_dict)})"
            )
        return getattr(self.fused_worker_dict[role], method)(*args, **kwargs)

    namespace = {
        "__init__": __init__,
        "_fuw_execute": _fuw_execute,
        "__doc__": f"Roles {list(raw_cls_dict)} fused into one worker process.",
        "is_fused_worker": True,
        "raw_cls_dict": raw_cls_dict,
    }
    return type(class_name, (Worker,), namespace)


def create_colocated_worker_cls_fused(class_dict: dict[str, RayClassWithInitArgs]) -> RayClassWithInitArgs:
    """``RayClassWithInitArgs`` of the ``ray.remote``-ed fused class, marked ``fused_worker_used``.

    A ``RayWorkerGroup`` over it gives per-role views with ``spawn(prefix_set=roles)``, or attributes
    ``wg.{role}`` after ``wg.fuse(prefix_set=roles)``.
    """
    spec = RayClassWithInitArgs(cls=ray.remote(create_colocated_worker_raw_cls(class_dict)))
    spec.fused_worker_used = True
    return spec
