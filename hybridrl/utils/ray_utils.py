"""Starting or joining Ray for hybridrl (``ray_init.*`` config section).

Local cluster (no ``ray_init.address`` and no ``RAY_ADDRESS``): see :mod:`hybridrl.utils.ray_security`
(every Ray server bound to 127.0.0.1, token authentication with a token generated per run), dashboard
bound to 127.0.0.1 and off unless ``ray_init.include_dashboard=true``, and — on ``trainer.device=cpu`` —
more logical CPUs than cores, so that placement-group bundles, colocated actors and the TaskRunner
always fit on a 2-core box (Ray actors idle most of the time; ``ray_init.num_cpus`` overrides), the
workers' host allocator chosen by ``HYBRIDRL_CPU_ALLOCATOR`` (:mod:`hybridrl.utils.cpu_allocator`), and the
workers at the driver's priority (:data:`CPU_WORKER_NICENESS`).
Existing cluster (``ray_init.address=auto`` or ``ray://…``): joined as is (securing it is the
cluster owner's job: docs/security.md).

Also verl's helpers of this module: ``parallel_put`` (``ray.put`` from a thread pool, order kept) and
``ray_noset_visible_devices``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hybridrl.utils.cpu_allocator import AllocatorChoice, choose_allocator
from hybridrl.utils.ray_security import enable_local_token_auth, loopback_only_node

# Logical CPUs a local CPU-device cluster advertises at least: room for 2 workers × max_colocate_count
# bundles, the TaskRunner and tests' extra pools; real parallelism is still bounded by the cores.
MIN_LOCAL_LOGICAL_CPUS = 16
# Ray starts its workers at niceness 15 to keep its own daemons responsive. On a local CPU cluster the workers are
# the training itself: beside any other busy process (a browser, an editor's indexer) niceness 15 leaves them a few
# percent of a core (nice 15 weighs 36 against nice 0's 1024 in Linux's scheduler), and a multi-threaded worker
# stalls at every barrier. At 0 they share the CPU equally with the other work. ``RAY_worker_niceness`` set by the
# user wins.
CPU_WORKER_NICENESS = 0


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    value = cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)
    return default if value is None else value


def ray_init_kwargs(
    ray_init_cfg: Any,
    device: str = "cuda",
    env_vars: dict[str, str] | None = None,
    min_num_cpus: int | None = None,
    allocator: AllocatorChoice | None = None,
) -> dict[str, Any]:
    """The keyword arguments ``init_ray`` passes to ``ray.init``.

    Args:
        ray_init_cfg: the ``ray_init`` config section (``num_cpus``, optional ``address``,
            ``include_dashboard``); None means all defaults.
        device: ``trainer.device``.
        env_vars: environment for every Ray worker (runtime_env).
        min_num_cpus: logical CPUs the run needs at least (local cluster without ``num_cpus``).
        allocator: host allocator environment for the workers of a local cluster (``env_vars`` win).
    """
    address = _get(ray_init_cfg, "address") or os.environ.get("RAY_ADDRESS")
    runtime_env = {"env_vars": {**(env_vars or {})}}
    if address:
        return {"address": address, "runtime_env": runtime_env}
    num_cpus = _get(ray_init_cfg, "num_cpus")
    if num_cpus is None:
        floor = max(MIN_LOCAL_LOGICAL_CPUS if device == "cpu" else 0, min_num_cpus or 0)
        cores = os.cpu_count() or 1
        num_cpus = max(cores, floor) if floor > cores else None  # None: Ray counts the cores itself
    if allocator is not None:
        runtime_env["env_vars"] = {**allocator.env, **runtime_env["env_vars"]}
    kwargs: dict[str, Any] = {
        # "local": always a new local cluster, never silently joining one another process started on this box
        "address": "local",
        "include_dashboard": bool(_get(ray_init_cfg, "include_dashboard")),  # None config: the YAML's False
        "dashboard_host": "127.0.0.1",
        "runtime_env": runtime_env,
    }
    if num_cpus is not None:
        kwargs["num_cpus"] = int(num_cpus)
    if device == "cpu" and "RAY_worker_niceness" not in os.environ:
        kwargs["_system_config"] = {"worker_niceness": CPU_WORKER_NICENESS}
    return kwargs


def init_ray(
    ray_init_cfg: Any = None,
    device: str = "cuda",
    env_vars: dict[str, str] | None = None,
    min_num_cpus: int | None = None,
) -> dict[str, Any]:
    """Start a local Ray cluster or join ``ray_init.address``; no-op if Ray is up. Returns the kwargs used."""
    import ray

    if ray.is_initialized():
        return ray_init_kwargs(ray_init_cfg, device, env_vars, min_num_cpus)
    allocator = choose_allocator() if device == "cpu" else None
    kwargs = ray_init_kwargs(ray_init_cfg, device, env_vars, min_num_cpus, allocator)
    if kwargs.get("address") != "local":
        ray.init(**kwargs)
        return kwargs
    if allocator is not None:
        print(f"[hybridrl] host allocator: {allocator.message}", flush=True)
    enable_local_token_auth()  # the daemons and workers inherit this process's environment
    with loopback_only_node():
        ray.init(**kwargs)
    return kwargs


# Ray leaves the device-visibility variable alone when one of these is set (one per accelerator kind).
NOSET_VISIBLE_DEVICES_ENV_VARS = (
    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_HABANA_VISIBLE_MODULES",
    "RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES",
    "RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS",
    "RAY_EXPERIMENTAL_NOSET_ONEAPI_DEVICE_SELECTOR",
)


def ray_noset_visible_devices(env_vars: Mapping[str, str] = os.environ) -> bool:
    """True if any ``RAY_EXPERIMENTAL_NOSET_*_VISIBLE_*`` variable is set (non-empty) in ``env_vars``."""
    return any(env_vars.get(name) for name in NOSET_VISIBLE_DEVICES_ENV_VARS)


# Threads parallel_put uses at most by default (verl).
_MAX_PUT_THREADS = 16


def parallel_put(data_list: list[Any], max_workers: int | None = None) -> list[Any]:
    """``ray.put`` every item of ``data_list`` from a thread pool; the refs come back in input order.

    Args:
        data_list: objects to store; must not be empty.
        max_workers: threads to use (default ``min(len(data_list), 16)``).

    Returns:
        ``ray.ObjectRef`` list, ``refs[i]`` holding ``data_list[i]``.
    """
    import ray

    if len(data_list) == 0:  # AssertionError as in verl, but kept under ``python -O``
        raise AssertionError("data_list must not be empty")
    if max_workers is None:
        max_workers = min(len(data_list), _MAX_PUT_THREADS)
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        return list(pool.map(ray.put, data_list))  # map yields in submission order
