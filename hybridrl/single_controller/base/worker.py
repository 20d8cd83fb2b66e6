"""``Worker``: the base class of every SPMD process a worker group drives (verl's worker.py).

The worker group starts each worker with its place in the group in the environment:
``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` (rank 0's node and a free port, for
``torch.distributed``), ``LOCAL_WORLD_SIZE``/``LOCAL_RANK`` (defaults 1 and 0: Ray gives each actor
its own device), ``WG_PREFIX`` and ``WG_BACKEND``. Subclasses add ``@register``-ed methods; they
call ``hybridrl.utils.distributed.init_distributed(self.device_name)`` in ``init_model`` to form
the process group.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from hybridrl.single_controller.base.decorator import Dispatch, Execute, register
from hybridrl.utils.ports import free_port


def _node_ip() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address().strip("[]")
    except ImportError:
        pass
    return socket.gethostbyname(socket.gethostname())


def _has_gpu() -> bool:
    """True when this process was given a CUDA device.

    ``HYBRIDRL_DEVICE`` (set by the worker group from ``trainer.device``) decides when present.
    Inside a Ray actor the answer is Ray's GPU assignment (cheap, no torch import); elsewhere
    ``torch.cuda.is_available()``.
    """
    requested = os.environ.get("HYBRIDRL_DEVICE", "").strip().lower()
    if requested in ("cpu", "cuda"):
        return requested == "cuda"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    try:
        import ray

        if ray.is_initialized():
            return len(ray.get_gpu_ids()) > 0
    except ImportError:
        pass
    import torch

    return torch.cuda.is_available()


class Worker:
    """One SPMD process of a worker group; reads its rank and rendezvous point from the environment."""

    # Inside a fused worker (``create_colocated_worker_raw_cls``) every role's worker gets this attribute:
    # role name -> that role's worker object in the same process.
    fused_worker_attr_name = "fused_worker_dict"

    def __init__(self, cuda_visible_devices: str | None = None) -> None:
        self._rank = int(os.environ.get("RANK", "0"))
        self._world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self._master_addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        self._master_port = os.environ.get("MASTER_PORT", "")
        self._local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        self._local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if cuda_visible_devices is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
        self._device_name: str | None = None  # resolved on first use
        # mesh name -> this worker's dp rank / whether its output is collected (mesh-aware dispatch)
        self._dispatch_dp_rank: dict[str, int] = {}
        self._collect_dp_rank: dict[str, bool] = {}
        self.fused_worker_dict: dict[str, Worker] = {}

    # ------------------------------------------------------------------ identity

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def local_rank(self) -> int:
        return self._local_rank

    @property
    def local_world_size(self) -> int:
        return self._local_world_size

    @property
    def device_name(self) -> str:
        """``"cuda"`` if this worker was given a GPU, else ``"cpu"``."""
        if self._device_name is None:
            self._device_name = "cuda" if _has_gpu() else "cpu"
        return self._device_name

    def get_master_addr_port(self) -> tuple[str, str]:
        return self._master_addr, self._master_port

    def get_cuda_visible_devices(self) -> str:
        return os.environ.get("CUDA_VISIBLE_DEVICES", "not set")

    def get_node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def get_pid(self) -> int:
        return os.getpid()

    @staticmethod
    def _get_node_ip() -> str:
        return _node_ip()

    @staticmethod
    def _get_free_port() -> int:
        return free_port()

    def get_available_master_addr_port(self) -> tuple[str, str]:
        return _node_ip(), str(free_port())

    # verl's spelling of the same method
    get_availale_master_addr_port = get_available_master_addr_port

    @classmethod
    def env_keys(cls) -> list[str]:
        """The environment variables a worker reads its place in the group from (verl)."""
        return [
            "WORLD_SIZE",
            "RANK",
            "LOCAL_WORLD_SIZE",
            "LOCAL_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
            "CUDA_VISIBLE_DEVICES",
        ]

    def get_fused_worker_by_name(self, worker_name: str) -> Worker | None:
        """The worker of role ``worker_name`` fused into the same process (None outside a fused worker)."""
        return self.fused_worker_dict.get(worker_name)

    # ------------------------------------------------------------------ mesh-aware dispatch

    def _register_dispatch_collect_info(self, mesh_name: str, dp_rank: int, is_collect: bool) -> None:
        """Declare this worker's dp rank on ``mesh_name`` and whether the driver collects its output.

        Tensor-parallel replicas of one dp rank share ``dp_rank``; exactly one of them sets
        ``is_collect=True``.
        """
        if mesh_name in self._dispatch_dp_rank:
            raise ValueError(f"mesh '{mesh_name}' is already registered on rank {self._rank}")
        self._dispatch_dp_rank[mesh_name] = int(dp_rank)
        self._collect_dp_rank[mesh_name] = bool(is_collect)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_dispatch_info(self, mesh_name: str) -> int:
        if mesh_name not in self._dispatch_dp_rank:
            raise KeyError(
                f"mesh '{mesh_name}' is not registered on rank {self._rank} of {type(self).__name__}; call "
                "self._register_dispatch_collect_info(mesh_name, dp_rank, is_collect) in the worker first"
            )
        return self._dispatch_dp_rank[mesh_name]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_collect_info(self, mesh_name: str) -> bool:
        if mesh_name not in self._collect_dp_rank:
            raise KeyError(f"mesh '{mesh_name}' is not registered on rank {self._rank} of {type(self).__name__}")
        return self._collect_dp_rank[mesh_name]

    # ------------------------------------------------------------------ generic remote execution

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO_WITH_FUNC)
    def execute_with_func_generator(self, func: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run ``func(self, *chunks)`` on every worker (arg chunks dispatched data-parallel)."""
        return func(self, *args, **kwargs)

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def execute_func_rank_zero(self, func: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run ``func(*args, **kwargs)`` on rank 0 only."""
        return func(*args, **kwargs)
