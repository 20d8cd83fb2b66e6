"""Backend-independent pieces of a worker group (verl's worker_group.py).

``ResourcePool`` says how many processes run on each node; ``ClassWithInitArgs`` is a deferred
constructor; ``WorkerGroup`` turns every ``@register``-ed method of the worker class into a driver
method that runs ``dispatch_fn → execute_fn → wait (if blocking) → collect_fn → unpad``.
Backends (``RayWorkerGroup``) provide the workers, ``execute_all``/``execute_rank_zero`` and ``_wait``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hybridrl.single_controller.base.decorator import (
    MAGIC_ATTR,
    PADDING_SIZE_KEY,
    get_predefined_execute_fn,
    resolve_dispatch_fns,
    unpad_output,
)


class ResourcePool:
    """Processes per node, e.g. ``ResourcePool([8, 8])`` is 16 workers on two nodes.

    Args:
        process_on_nodes: number of worker processes (devices) on each node.
        max_colocate_count: how many worker groups may share one device (bundle).
        n_gpus_per_node: devices per node (informational).
    """

    def __init__(
        self, process_on_nodes: list[int] | None = None, max_colocate_count: int = 10, n_gpus_per_node: int = 8
    ) -> None:
        self._store: list[int] = list(process_on_nodes) if process_on_nodes is not None else []
        self.max_colocate_count = max_colocate_count
        self.n_gpus_per_node = n_gpus_per_node

    def add_node(self, process_count: int) -> None:
        self._store.append(process_count)

    @property
    def world_size(self) -> int:
        return sum(self._store)

    @property
    def store(self) -> list[int]:
        return self._store

    def __call__(self) -> list[int]:
        return self._store

    def local_world_size_list(self) -> list[int]:
        """Per global rank: the number of workers on that rank's node."""
        return [count for count in self._store for _ in range(count)]

    def local_rank_list(self) -> list[int]:
        """Per global rank: its index among the workers of its node."""
        return [local_rank for count in self._store for local_rank in range(count)]


class ClassWithInitArgs:
    """A class plus the arguments to construct it later (in another process)."""

    def __init__(self, cls: Any, *args: Any, **kwargs: Any) -> None:
        self.cls = cls
        self.args = args
        self.kwargs = kwargs
        # True for a fused worker class (create_colocated_worker_cls_fused): groups route calls through it
        self.fused_worker_used = False

    def __call__(self) -> Any:
        return self.cls(*self.args, **self.kwargs)


def func_generator(
    worker_group: WorkerGroup,
    method_name: str,
    dispatch_fn: Callable,
    collect_fn: Callable,
    execute_fn: Callable,
    blocking: bool,
) -> Callable:
    """The driver-side method: dispatch → execute → wait (if blocking) → collect → drop padding."""

    def method(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = dispatch_fn(worker_group, *args, **kwargs)
        pad_size = kwargs.pop(PADDING_SIZE_KEY, 0)
        output = execute_fn(method_name, *args, **kwargs)
        if blocking:
            output = worker_group._wait(method_name, output)
        output = collect_fn(worker_group, output)
        return unpad_output(output, pad_size)

    method.__name__ = method.__qualname__ = method_name
    return method


def registered_methods(user_defined_cls: type) -> dict[str, dict[str, Any]]:
    """``{method_name: attrs}`` for every ``@register``-ed method of a class (inherited ones too)."""
    found = {}
    for name in dir(user_defined_cls):
        try:
            attr = getattr(user_defined_cls, name)
        except Exception:  # properties or descriptors that fail on the class
            continue
        if callable(attr) and hasattr(attr, MAGIC_ATTR):
            found[name] = getattr(attr, MAGIC_ATTR)
    return found


class WorkerGroup:
    """A group of SPMD workers driven as one object; subclasses supply the backend."""

    # the fused worker's entry point: ``_fuw_execute("{role}_fwmn_{method}", *args, **kwargs)``
    fused_worker_execute_fn_name = "_fuw_execute"

    def __init__(self, resource_pool: ResourcePool | None, **kwargs: Any) -> None:
        self._is_init_with_detached_workers = resource_pool is None
        self.fused_worker_used = False
        self._procecss_dispatch_config = resource_pool() if resource_pool is not None else None
        self._workers: list[Any] = []
        self._worker_names: list[str] = []
        # mesh name -> per-rank dp rank / collect flag (filled lazily by mesh-aware dispatch)
        self._dispatch_info: dict[str, list[int]] = {}
        self._collect_info: dict[str, list[bool]] = {}
        self._master_addr: str | None = None
        self._master_port: str | None = None

    @property
    def world_size(self) -> int:
        return len(self._workers)

    # ------------------------------------------------------------------ backend hooks

    def _share(self, obj: Any) -> Any:
        """Store an object once for several workers (identity here; ``ray.put`` on Ray)."""
        return obj

    def _wait(self, method_name: str, output: Any) -> Any:
        """Block until the results of an execute call are ready and return them."""
        raise NotImplementedError

    def execute_all(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def execute_rank_zero(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------------ binding

    def _bind_worker_method(self, user_defined_cls: type, func_generator: Callable = func_generator) -> list[str]:
        """Give this group one driver method per ``@register``-ed method of ``user_defined_cls``."""
        bound = []
        for method_name, attrs in registered_methods(user_defined_cls).items():
            dispatch_fn, collect_fn = resolve_dispatch_fns(attrs["dispatch_mode"])
            execute_fn = getattr(self, get_predefined_execute_fn(attrs["execute_mode"])["execute_fn_name"])
            func = func_generator(
                self,
                method_name,
                dispatch_fn=dispatch_fn,
                collect_fn=collect_fn,
                execute_fn=execute_fn,
                blocking=attrs["blocking"],
            )
            setattr(self, method_name, func)
            bound.append(method_name)
        return bound
