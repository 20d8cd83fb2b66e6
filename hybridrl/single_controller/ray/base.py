"""``RayWorkerGroup``: N Ray actors in a resource pool, driven as one object (verl's ray/base.py).

Creation: the pool's placement groups are sorted by node IP then node id; a tiny task on bundle 0
picks ``MASTER_ADDR``/``MASTER_PORT``; actor ``rank`` goes to bundle ``local_rank`` of the
``pg_idx``-th group with ``WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT, WG_PREFIX, WG_BACKEND=ray,
RAY_LOCAL_WORLD_SIZE, RAY_LOCAL_RANK`` in its environment; then a cheap readiness call makes any
``__init__`` failure surface now, naming the rank.

Calls: every ``@register``-ed method of the worker class becomes a method of the group running
``dispatch → execute_all/execute_rank_zero (async) → wait (if blocking) → collect``. Waiting goes
through ``get_from_workers``: a dead or raising worker fails the call at once with a
``WorkerGroupError`` naming group, method and rank.

Colocation (several roles in one actor process): ``create_colocated_worker_cls`` (``colocate.py``,
``{role}_{method}`` names, ``spawn`` rebinds them) and the fused form ``create_colocated_worker_cls_fused`` /
``create_colocated_worker_raw_cls`` (``fused_worker.py``, ``spawn``/``fuse`` route through ``_fuw_execute``);
both are importable from here, as in verl.
"""

from __future__ import annotations

import socket
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from hybridrl.single_controller.base.worker_group import WorkerGroup, func_generator
from hybridrl.single_controller.ray.actor_class import RayClassWithInitArgs, actor_class_name, user_class
from hybridrl.single_controller.ray.colocate import create_colocated_worker_cls
from hybridrl.single_controller.ray.errors import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_READY_TIMEOUT_S,
    get_from_workers,
)
from hybridrl.single_controller.ray.fused_worker import (
    FUSED_METHOD_SEPARATOR,
    FusedWorkerCLSName,
    create_colocated_worker_cls_fused,
    create_colocated_worker_raw_cls,
)
from hybridrl.single_controller.ray.resource_pool import RayResourcePool, sort_placement_group_by_node_ip

__all__ = [
    "FusedWorkerCLSName",
    "RayClassWithInitArgs",
    "RayResourcePool",
    "RayWorkerGroup",
    "create_colocated_worker_cls",
    "create_colocated_worker_cls_fused",
    "create_colocated_worker_raw_cls",
    "func_generator",
    "get_random_string",
    "sort_placement_group_by_node_ip",
]

# Environment the worker group owns; worker_env may add keys but never override these.
RESERVED_ENV_VARS = (
    "WORLD_SIZE",
    "RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WG_PREFIX",
    "WG_BACKEND",
    "RAY_LOCAL_WORLD_SIZE",
    "RAY_LOCAL_RANK",
)


def get_random_string(length: int) -> str:
    import random
    import string

    return "".join(random.choices(string.ascii_letters + string.digits, k=length))


@ray.remote(num_cpus=0)
def get_master_addr_port() -> tuple[str, str]:
    """Rank 0's node IP and a free port (runs on bundle 0 of the first placement group)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    return ray.util.get_node_ip_address().strip("[]"), str(port)


class RayWorkerGroup(WorkerGroup):
    """A worker group whose workers are Ray actors placed in a ``RayResourcePool``.

    Args:
        resource_pool: where the workers go (None with ``worker_handles``/``worker_names``: attach).
        ray_cls_with_init: the worker class (``ray.remote``-ed) and its constructor arguments.
        bin_pack: STRICT_PACK placement groups (one per node) rather than PACK.
        name_prefix: prefix of actor names and of ``WG_PREFIX`` (random if None).
        detached: actors outlive the driver.
        worker_names / worker_handles: attach to existing actors instead of creating them.
        device_name: ``"cuda"`` or ``"cpu"`` (default: from ``resource_pool.use_gpu``).
        worker_env: extra environment variables for every worker (may not override the reserved ones).
        ready_timeout_s: how long the actors may take to start before creation fails.
        call_timeout_s: sanity limit of one blocking call (None: no limit).
    """

    def __init__(
        self,
        resource_pool: RayResourcePool | None = None,
        ray_cls_with_init: RayClassWithInitArgs | None = None,
        bin_pack: bool = True,
        name_prefix: str | None = None,
        detached: bool = False,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        device_name: str | None = None,
        worker_env: dict[str, str] | None = None,
        ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
        call_timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        # verl's name for the start-up wait
        ready_timeout_s = kwargs.pop("ray_wait_register_center_timeout", ready_timeout_s)
        super().__init__(resource_pool=resource_pool, **kwargs)
        if ray_cls_with_init is None:
            raise ValueError("RayWorkerGroup needs ray_cls_with_init (the worker class and its arguments)")
        self.ray_cls_with_init = ray_cls_with_init
        self.name_prefix = get_random_string(6) if name_prefix is None else name_prefix
        self.ready_timeout_s = ready_timeout_s
        self.call_timeout_s = call_timeout_s
        use_gpu = resource_pool.use_gpu if resource_pool is not None else False
        self.device_name = device_name or ("cuda" if use_gpu else "cpu")
        if worker_handles is not None or worker_names is not None:
            self._attach(worker_names, worker_handles)
        elif resource_pool is not None:
            self._init_with_resource_pool(resource_pool, bin_pack, detached, worker_env)
        else:
            raise ValueError("RayWorkerGroup needs a resource_pool, or worker_handles/worker_names to attach to")
        # a group over a fused worker class routes role calls through _fuw_execute (see spawn_fused)
        self.fused_worker_used = getattr(ray_cls_with_init, "fused_worker_used", False)
        self.sub_cls_name = ""  # the role a view of a fused group is bound to
        self.wg_dict: dict[str, RayWorkerGroup] | None = None
        self.method_names = self._bind_worker_method(user_class(ray_cls_with_init.cls))

    # ------------------------------------------------------------------ creation

    def _attach(self, worker_names: list[str] | None, worker_handles: list[Any] | None) -> None:
        if worker_handles is None:
            worker_handles = [ray.get_actor(name) for name in worker_names or []]
        self._workers = list(worker_handles)
        self._worker_names = list(worker_names) if worker_names is not None else [str(w) for w in worker_handles]

    def _init_with_resource_pool(
        self, pool: RayResourcePool, bin_pack: bool, detached: bool, worker_env: dict[str, str] | None
    ) -> None:
        pgs = pool.get_placement_groups(strategy="STRICT_PACK" if bin_pack else "PACK", device_name=self.device_name)
        pgs = sort_placement_group_by_node_ip(pgs)
        pool.reserve_bundle_cpus(self.ray_cls_with_init.num_cpus_per_actor(), self.name_prefix)
        strategy = PlacementGroupSchedulingStrategy(placement_group=pgs[0], placement_group_bundle_index=0)
        self._master_addr, self._master_port = ray.get(
            get_master_addr_port.options(scheduling_strategy=strategy).remote()
        )
        rank = 0
        for pg_idx, (pg, local_world_size) in enumerate(zip(pgs, pool.store)):
            for local_rank in range(local_world_size):
                env = self._worker_env(rank, pool, local_world_size, local_rank, worker_env)
                self._create_worker(pg, pg_idx, local_rank, env, pool, detached)
                rank += 1
        self._wait_ready()

    def _worker_env(
        self,
        rank: int,
        pool: RayResourcePool,
        local_world_size: int,
        local_rank: int,
        worker_env: dict[str, str] | None,
    ) -> dict[str, str]:
        env = {
            "WORLD_SIZE": str(pool.world_size),
            "RANK": str(rank),
            "WG_PREFIX": self.name_prefix,
            "WG_BACKEND": "ray",
            "RAY_LOCAL_WORLD_SIZE": str(local_world_size),
            "RAY_LOCAL_RANK": str(local_rank),
            "MASTER_ADDR": str(self._master_addr),
            "MASTER_PORT": str(self._master_port),
        }
        conflicts = sorted(set(env) & set(worker_env or {}))
        if conflicts:
            raise ValueError(f"worker_env may not set {conflicts}: the worker group sets them ({RESERVED_ENV_VARS})")
        # HYBRIDRL_DEVICE tells hybridrl.utils.device which device the worker computes on (overridable)
        return {"HYBRIDRL_DEVICE": self.device_name, **env, **(worker_env or {})}

    def _create_worker(
        self, pg: Any, pg_idx: int, local_rank: int, env: dict[str, str], pool: RayResourcePool, detached: bool
    ) -> None:
        name = f"{self.name_prefix}{actor_class_name(self.ray_cls_with_init.cls)}_{pg_idx}:{local_rank}"
        self.ray_cls_with_init.update_options({"runtime_env": {"env_vars": env}, "name": name})
        if detached:
            self.ray_cls_with_init.update_options({"lifetime": "detached"})
        worker = self.ray_cls_with_init(
            placement_group=pg,
            placement_group_bundle_idx=local_rank,
            use_gpu=pool.use_gpu,
            num_gpus=1 / pool.max_colocate_count,
            device_name=self.device_name,
        )
        self._workers.append(worker)
        self._worker_names.append(name)

    def _wait_ready(self) -> None:
        """Fail now (naming the rank and cause) if any actor cannot start, e.g. ``__init__`` raised."""
        refs = [w.__ray_ready__.remote() for w in self._workers]
        self._get(refs, list(range(len(refs))), "__init__", self.ready_timeout_s)

    # ------------------------------------------------------------------ execution

    @property
    def worker_names(self) -> list[str]:
        return self._worker_names

    @property
    def workers(self) -> list[Any]:
        """The actor handles, in rank order."""
        return self._workers

    @property
    def master_address(self) -> str | None:
        return self._master_addr

    @property
    def master_port(self) -> str | None:
        return self._master_port

    def _get(self, refs: list[Any], ranks: list[int], method_name: str, timeout_s: float | None) -> list[Any]:
        return get_from_workers(
            refs,
            ranks,
            wg_name=self.name_prefix,
            method_name=method_name,
            worker_names=self._worker_names,
            timeout_s=timeout_s,
        )

    def _share(self, obj: Any) -> Any:
        return ray.put(obj)

    def _wait(self, method_name: str, output: Any) -> Any:
        if isinstance(output, list):
            return self._get(output, list(range(len(output))), method_name, self.call_timeout_s)
        return self._get([output], [0], method_name, self.call_timeout_s)[0]

    def _execute_remote_single_worker(self, worker: Any, method_name: str, *args: Any, **kwargs: Any) -> Any:
        if self.fused_worker_used and method_name not in self.method_names:
            fused_name = f"{self.sub_cls_name}{FUSED_METHOD_SEPARATOR}{method_name}"
            return getattr(worker, self.fused_worker_execute_fn_name).remote(fused_name, *args, **kwargs)
        return getattr(worker, method_name).remote(*args, **kwargs)

    def execute_rank_zero_async(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        return self._execute_remote_single_worker(self._workers[0], method_name, *args, **kwargs)

    def execute_rank_zero_sync(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        return self._wait(method_name, self.execute_rank_zero_async(method_name, *args, **kwargs))

    def execute_rank_zero(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        return self.execute_rank_zero_async(method_name, *args, **kwargs)

    def execute_all(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self.execute_all_async(method_name, *args, **kwargs)

    def execute_all_sync(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self._wait(method_name, self.execute_all_async(method_name, *args, **kwargs))

    def execute_all_async(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``method_name`` on every worker; list args of length world_size are scattered (item i → rank i)."""
        n = len(self._workers)
        values = [*args, *kwargs.values()]
        if values and all(isinstance(v, list) and len(v) == n for v in values):
            return [
                self._execute_remote_single_worker(
                    worker, method_name, *(a[i] for a in args), **{k: v[i] for k, v in kwargs.items()}
                )
                for i, worker in enumerate(self._workers)
            ]
        return [self._execute_remote_single_worker(w, method_name, *args, **kwargs) for w in self._workers]

    # ------------------------------------------------------------------ views and teardown

    @classmethod
    def from_detached(
        cls,
        name_prefix: str | None = None,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        ray_cls_with_init: RayClassWithInitArgs | None = None,
        **kwargs: Any,
    ) -> RayWorkerGroup:
        """A group over existing actors (by handle, or by name for detached actors)."""
        return cls(
            resource_pool=None,
            ray_cls_with_init=ray_cls_with_init,
            name_prefix=name_prefix,
            worker_names=worker_names,
            worker_handles=worker_handles,
            **kwargs,
        )

    def _view(self) -> RayWorkerGroup:
        """A new group object over the same actors (no new processes)."""
        view = self.from_detached(
            name_prefix=self.name_prefix,
            worker_names=self._worker_names,
            worker_handles=self._workers,
            ray_cls_with_init=self.ray_cls_with_init,
            device_name=self.device_name,
            ready_timeout_s=self.ready_timeout_s,
            call_timeout_s=self.call_timeout_s,
        )
        view._master_addr, view._master_port = self._master_addr, self._master_port
        return view

    def spawn(self, prefix_set: Any) -> dict[str, RayWorkerGroup]:
        """One view per role of a colocated group, with ``{role}_{method}`` rebound as ``{method}``."""
        if self.fused_worker_used:
            return self.spawn_fused(prefix_set)
        role_methods = getattr(user_class(self.ray_cls_with_init.cls), "role_methods", {})
        views = {}
        for prefix in prefix_set:
            view = self._view()
            names = role_methods.get(prefix) or [m[len(prefix) + 1 :] for m in dir(view) if m.startswith(prefix + "_")]
            for method_name in names:
                setattr(view, method_name, getattr(view, f"{prefix}_{method_name}"))
            views[prefix] = view
        return views

    def spawn_fused(self, prefix_set: Any) -> dict[str, RayWorkerGroup]:
        """One view per role of a fused group: the role class's methods, called through ``_fuw_execute``."""
        views = {}
        for role in prefix_set:
            view = self._view()
            view.sub_cls_name = role
            view.method_names = []  # every call of a role view goes to the role's worker
            view._bind_worker_method(user_class(self.ray_cls_with_init.cls).raw_cls_dict[role])
            views[role] = view
        return views

    def fuse(self, prefix_set: Any) -> None:
        """Attach the role views as attributes: ``wg.actor.update(...)`` after ``wg.fuse({"actor", ...})``."""
        if self.wg_dict is None:
            self.wg_dict = self.spawn(prefix_set)
        for role, view in self.wg_dict.items():
            setattr(self, role, view)

    def kill(self) -> None:
        """Kill every actor of the group (the resource pool keeps its placement groups)."""
        for worker in self._workers:
            ray.kill(worker, no_restart=True)
