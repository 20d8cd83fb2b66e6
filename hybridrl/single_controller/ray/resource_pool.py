"""``RayResourcePool``: one STRICT_PACK placement group per node, checked before Ray can hang.

A pool ``process_on_nodes=[n0, n1, ...]`` becomes one placement group per node with ``n_i``
bundles; each bundle is one "device": ``{"CPU": max_colocate_count, "GPU": 1}`` on GPU,
``{"CPU": max_colocate_count}`` when ``use_gpu=False`` (the CPU backend, where a bundle stands for
one worker process). Each actor takes 1 CPU (Ray's default) and ``1/max_colocate_count`` GPU of
its bundle, so up to ``max_colocate_count`` worker groups can share the pool.

Ray waits forever for a placement group (or actor) that can never be placed. The pool therefore
checks the cluster's free resources first and waits for ``pg.ready()`` with a timeout, failing
with a ``ResourceUnavailableError`` that names the pool and the shortfall.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group

from hybridrl.single_controller.base.worker_group import ResourcePool
from hybridrl.single_controller.ray.errors import DEFAULT_PG_READY_TIMEOUT_S, ResourceUnavailableError

_DEVICE_RESOURCE = {"cuda": "GPU", "npu": "NPU"}
_EPS = 1e-6


class RayResourcePool(ResourcePool):
    """Processes per node, realised as Ray placement groups (created on first use, then cached).

    Args:
        process_on_nodes: worker processes (devices) per node, e.g. ``[2, 2]``.
        use_gpu: GPU bundles (True) or CPU-only bundles (``trainer.device=cpu``).
        name_prefix: prefix of the placement-group names (the pool name in messages).
        max_colocate_count: worker groups that may share one bundle.
        detached: placement groups outlive the driver.
        accelerator_type: optional Ray accelerator label (e.g. ``"A100"``) each bundle must carry.
        pg_ready_timeout_s: how long to wait for the placement groups before failing.
    """

    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        use_gpu: bool = True,
        name_prefix: str | None = None,
        max_colocate_count: int = 10,
        detached: bool = False,
        accelerator_type: str | None = None,
        pg_ready_timeout_s: float = DEFAULT_PG_READY_TIMEOUT_S,
    ) -> None:
        super().__init__(process_on_nodes, max_colocate_count)
        self.use_gpu = use_gpu
        self.name_prefix = name_prefix or ""
        self.detached = detached
        self.accelerator_type = accelerator_type
        self.pg_ready_timeout_s = pg_ready_timeout_s
        self.pgs: list[PlacementGroup] | None = None
        # CPUs of each bundle already promised to actors (the pool's colocation budget)
        self.bundle_cpus_used = 0.0

    @property
    def display_name(self) -> str:
        return self.name_prefix or f"pool{self._store}"

    def bundle(self, device_name: str = "cuda") -> dict[str, float]:
        """The resources of one bundle (one device slot)."""
        bundle: dict[str, float] = {"CPU": float(self.max_colocate_count)}
        if self.use_gpu:
            bundle[_DEVICE_RESOURCE.get(device_name, "GPU")] = 1.0
            if self.accelerator_type is not None:
                label = self.accelerator_type
                bundle[label if label.startswith("accelerator_type:") else f"accelerator_type:{label}"] = 1e-3
        return bundle

    def get_placement_groups(
        self, strategy: str = "STRICT_PACK", name: str | None = None, device_name: str = "cuda"
    ) -> list[PlacementGroup]:
        """Create (once) and return one ready placement group per node, in ``process_on_nodes`` order."""
        if self.pgs is not None:
            return self.pgs
        bundle = self.bundle(device_name)
        # impossible on this cluster → fail now; merely busy (or freed a moment ago) → bounded wait below
        check_pool_fits(self.display_name, self._store, bundle, free=total_resources_per_node(), what="in all")
        prefix = name or f"{self.name_prefix}hybridrl_group_{'_'.join(map(str, self._store))}:"
        lifetime = "detached" if self.detached else None
        pgs = [
            placement_group(
                [dict(bundle) for _ in range(count)], strategy=strategy, name=f"{prefix}{i}", lifetime=lifetime
            )
            for i, count in enumerate(self._store)
        ]
        wait_placement_groups(self.display_name, pgs, bundle, self._store, self.pg_ready_timeout_s)
        self.pgs = pgs
        return pgs

    def reserve_bundle_cpus(self, cpus: float, wg_name: str) -> None:
        """Book ``cpus`` per bundle for one more worker group, or fail if the bundles are full."""
        if self.bundle_cpus_used + cpus > self.max_colocate_count + _EPS:
            raise ResourceUnavailableError(
                f"resource pool '{self.display_name}': worker group '{wg_name}' needs {cpus:g} CPU per bundle but "
                f"{self.bundle_cpus_used:g} of max_colocate_count={self.max_colocate_count} are taken by earlier "
                "worker groups, so its actors could never be placed. Fix: colocate the roles in one worker group "
                "(create_colocated_worker_cls) or create the pool with a larger max_colocate_count."
            )
        self.bundle_cpus_used += cpus

    def release(self) -> None:
        """Remove the placement groups (their actors must be gone already)."""
        for pg in self.pgs or []:
            remove_placement_group(pg)
        self.pgs = None
        self.bundle_cpus_used = 0.0


def _shortfall(needed: dict[str, float], available: dict[str, float]) -> dict[str, float]:
    return {k: round(v - available.get(k, 0.0), 3) for k, v in needed.items() if available.get(k, 0.0) + _EPS < v}


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """Free resources of every alive node (node id → resources)."""
    try:
        from ray._private.state import available_resources_per_node as _per_node

        return dict(_per_node())
    except (ImportError, AttributeError):  # private API moved: fall back to node totals
        return {n["NodeID"]: n["Resources"] for n in ray.nodes() if n.get("Alive")}


def total_resources_per_node() -> dict[str, dict[str, float]]:
    """Capacity of every alive node (node id → resources), whether in use or not."""
    return {n["NodeID"]: dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")}


def _fit_pools_on_nodes(
    free: dict[str, dict[str, float]], process_on_nodes: list[int], bundle: dict[str, float]
) -> list[int]:
    """Greedily place each per-node group on a node with room; returns the counts left unplaced.

    ``free`` is updated in place (so several pools can be checked one after another).
    """
    unplaced = []
    for count in process_on_nodes:
        need = {k: v * count for k, v in bundle.items()}
        node = next((n for n, res in free.items() if not _shortfall(need, res)), None)
        if node is None:
            unplaced.append(count)
            continue
        for k, v in need.items():
            free[node][k] = free[node].get(k, 0.0) - v
    return unplaced


def check_pool_fits(
    pool_name: str,
    process_on_nodes: list[int],
    bundle: dict[str, float],
    free: dict[str, dict[str, float]] | None = None,
    what: str = "free",
) -> None:
    """Fail at once if the cluster's resources cannot host the pool.

    Checks the totals, then that every per-node placement group (STRICT_PACK) fits on a single
    node. ``free`` (node id → resources, updated in place) defaults to the cluster's free
    resources now; pass ``total_resources_per_node()`` (and ``what="in all"``) to check capacity.
    """
    free = available_resources_per_node() if free is None else free
    total_bundles = sum(process_on_nodes)
    needed = {k: v * total_bundles for k, v in bundle.items()}
    available = {k: sum(res.get(k, 0.0) for res in free.values()) for k in needed}
    short = _shortfall(needed, available)
    fix = (
        "Fix: lower trainer.nnodes / trainer.n_gpus_per_node, use trainer.device=cpu on a machine without "
        "GPUs, or give Ray more resources (ray_init.num_cpus, more nodes)."
    )
    if short:
        raise ResourceUnavailableError(
            f"resource pool '{pool_name}' needs {total_bundles} bundles of {bundle} (process_on_nodes="
            f"{process_on_nodes}), i.e. {needed} in total, but the cluster has only {available} {what}; "
            f"short by {short}. {fix}"
        )
    unplaced = _fit_pools_on_nodes(free, process_on_nodes, bundle)
    if unplaced:
        raise ResourceUnavailableError(
            f"resource pool '{pool_name}': placement groups of {unplaced} bundles of {bundle} each need ONE node "
            f"(STRICT_PACK) with that much, and no node has it; resources per node ({what}): "
            f"{[{k: res.get(k, 0.0) for k in bundle} for res in free.values()]}. {fix}"
        )


def wait_placement_groups(
    pool_name: str, pgs: list[PlacementGroup], bundle: dict[str, float], process_on_nodes: list[int], timeout_s: float
) -> None:
    """Wait for all placement groups; on timeout remove them and raise a clear error."""
    ready, not_ready = ray.wait([pg.ready() for pg in pgs], num_returns=len(pgs), timeout=timeout_s)
    if not not_ready:
        return
    for pg in pgs:
        remove_placement_group(pg)
    raise ResourceUnavailableError(
        f"resource pool '{pool_name}': {len(not_ready)} of {len(pgs)} placement groups (process_on_nodes="
        f"{process_on_nodes}, bundles of {bundle}) could not be placed within {timeout_s:.0f}s; free resources "
        f"now: {ray.available_resources()}. Other pools or actors may hold the resources, or no single node "
        "has room for a whole placement group."
    )


def _ip_sort_key(ip: str) -> tuple[int, int, str]:
    """Numeric order for IPv4 then IPv6 addresses; anything unparsable last, as text."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return (99, 0, ip)
    return (address.version, int(address), "")


def placement_group_node(pg: PlacementGroup) -> str:
    """The node id hosting bundle 0 of a ready placement group."""
    return placement_group_table(pg)["bundles_to_node_id"][0]


def sort_placement_group_by_node_ip(pgs: list[PlacementGroup]) -> list[PlacementGroup]:
    """Order placement groups by node IP, then node id, so global ranks are stable across restarts."""
    node_ip = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}

    def key(pg: PlacementGroup) -> tuple[Any, str]:
        node_id = placement_group_node(pg)
        return (_ip_sort_key(node_ip.get(node_id, "")), node_id)

    return sorted(pgs, key=key)
