"""Worker classes and helpers shared by the single-controller tests.

This module is pickled *by value* into the Ray workers (the test directories are not importable
packages there), so everything the workers need is defined here.
"""

from __future__ import annotations

import asyncio
import os
import time

import ray
import ray.cloudpickle
import torch

from hybridrl.protocol import DataProto
from hybridrl.single_controller.base import Worker
from hybridrl.single_controller.base.decorator import (
    Dispatch,
    Execute,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)
from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

ray.cloudpickle.register_pickle_by_value(__import__(__name__))


def make_proto(n: int, auto_padding: bool = False) -> DataProto:
    """Rows ``x = [0, 1, ..., n-1]`` as a float tensor [n] plus a non-tensor copy ``tag``."""
    import numpy as np

    meta = {"_verl_auto_padding": True} if auto_padding else {}
    return DataProto.from_dict(
        tensors={"x": torch.arange(n, dtype=torch.float32)},
        non_tensors={"tag": np.array([f"row{i}" for i in range(n)], dtype=object)},
        meta_info=meta,
    )


class EchoWorker(Worker):
    """Records what each rank received; the arithmetic makes the rank visible in outputs."""

    def __init__(self, offset: float = 0.0) -> None:
        super().__init__()
        self.offset = offset
        self.calls = 0

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def identity(self) -> dict:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "env": {
                k: os.environ.get(k)
                for k in (
                    "WORLD_SIZE",
                    "RANK",
                    "MASTER_ADDR",
                    "MASTER_PORT",
                    "WG_PREFIX",
                    "WG_BACKEND",
                    "RAY_LOCAL_WORLD_SIZE",
                    "RAY_LOCAL_RANK",
                    "HYBRIDRL_DEVICE",
                    "EXTRA",
                )
            },
            "device": self.device_name,
        }

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def add_rank(self, value: float) -> float:
        return value + self.rank

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def all_to_all(self, value: float) -> float:
        return value * 10 + self.rank

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def dp_compute(self, value: float) -> float:
        return value * 100 + self.rank

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def double(self, data: DataProto) -> DataProto:
        """y = 2 x + offset; ``rank`` column records which worker computed the row."""
        n = len(data)
        out = DataProto.from_dict(
            tensors={"y": data.batch["x"] * 2 + self.offset, "rank": torch.full((n,), self.rank)},
            non_tensors={"tag": data.non_tensor_batch["tag"]},
        )
        return out

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def double_async(self, data: DataProto) -> DataProto:
        return self.double(data)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def y_plus_one(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"z": data.batch["y"] + 1})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def row_count(self, data: DataProto) -> dict:
        return {"rank": self.rank, "rows": len(data), "sum": float(data.batch["x"].sum())}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def only_rank_zero(self) -> int:
        self.calls += 1
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_calls(self) -> int:
        return self.calls

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail_on_rank(self, bad_rank: int) -> int:
        if self.rank == bad_rank:
            raise ValueError(f"deliberate failure on rank {self.rank}")
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sleep(self, seconds: float) -> int:
        time.sleep(seconds)
        return self.rank


class AsyncWorker(Worker):
    """``async def`` methods: Ray makes this an asyncio actor."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def sleep_then_rank(self, seconds: float) -> int:
        await asyncio.sleep(seconds)
        return self.rank

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    async def double(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"y": data.batch["x"] * 2})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    async def plus_one(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"z": data.batch["y"] + 1})


class MeshWorker(Worker):
    """4 workers as dp=2 × tp=2: ranks (0,1) hold dp rank 0, (2,3) dp rank 1; tp rank 0 is collected."""

    def __init__(self, tp_size: int = 2) -> None:
        super().__init__()
        self._register_dispatch_collect_info("actor", dp_rank=self.rank // tp_size, is_collect=self.rank % tp_size == 0)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("actor"))
    def tagged(self, data: DataProto) -> DataProto:
        n = len(data)
        return DataProto.from_dict(
            tensors={"x": data.batch["x"], "rank": torch.full((n,), self.rank)},
        )


class GlooWorker(Worker):
    """Forms a gloo group from the worker-group environment and all-reduces."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from hybridrl.utils.distributed import init_distributed

        init_distributed(self.device_name)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def all_reduce(self) -> list[float]:
        import torch.distributed as dist

        tensor = torch.tensor([float(self.rank + 1), 10.0 * (self.rank + 1)])
        dist.all_reduce(tensor)
        return tensor.tolist()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def listening_sockets(self) -> list[tuple[str, int]]:
        """``(address, port)`` of every TCP socket this worker process listens on."""
        import psutil

        connections = psutil.Process().net_connections(kind="tcp")
        return [(c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN]


class CounterRole(Worker):
    """A role with its own state, for colocation tests."""

    def __init__(self, start: int) -> None:
        super().__init__()
        self.value = start

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def increment(self, by: int) -> int:
        self.value += by
        return self.value

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def async_value(self) -> int:
        await asyncio.sleep(0)
        return self.value


class NameRole(Worker):
    """A second role with different methods (and its own mesh registration)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self._register_dispatch_collect_info("critic", dp_rank=self.rank, is_collect=True)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def greet(self) -> str:
        return f"{self.name}@{self.rank}"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("critic"))
    def values(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"v": data.batch["x"] + 0.5})


class AddRankRole(Worker):
    """Fused-worker tests: ``a += rank`` on each data-parallel chunk."""

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add(self, data: DataProto) -> DataProto:
        data.batch["a"] += self.rank
        return data

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()


class SubtractRole(Worker):
    """Fused-worker tests: ``a -= config["b"]``; can see the roles fused with it."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.config = config

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def sub(self, data: DataProto) -> DataProto:
        data.batch["a"] -= self.config["b"]
        return data

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sibling_pids(self) -> dict:
        """Role name -> pid as seen through ``get_fused_worker_by_name`` (empty outside a fused worker)."""
        return {name: self.get_fused_worker_by_name(name).pid() for name in sorted(self.fused_worker_dict)}


class BrokenInitWorker(Worker):
    def __init__(self) -> None:
        super().__init__()
        if self.rank == 1:
            raise RuntimeError("cannot load the model on this rank")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def ping(self) -> int:
        return self.rank


def make_group(cls: type, process_on_nodes: list[int], *args, max_colocate_count: int = 1, **kwargs):
    """A CPU resource pool and a worker group of ``cls`` on it."""
    pool = RayResourcePool(process_on_nodes, use_gpu=False, max_colocate_count=max_colocate_count)
    wg = RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(cls), *args), **kwargs)
    return pool, wg


def teardown(pool: RayResourcePool, *groups: RayWorkerGroup) -> None:
    """Kill the actors and free the placement groups (the session cluster is shared)."""
    for wg in groups:
        wg.kill()
    pool.release()
