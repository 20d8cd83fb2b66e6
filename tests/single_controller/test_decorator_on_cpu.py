"""Unit tests of @register and the dispatch/collect functions, with a fake worker group (no Ray)."""

from __future__ import annotations

import inspect
import pickle

import pytest
import torch
from sc_testlib import make_proto

from hybridrl.protocol import DataProto
from hybridrl.single_controller.base import Worker, WorkerGroup
from hybridrl.single_controller.base.decorator import (
    MAGIC_ATTR,
    PADDING_SIZE_KEY,
    Dispatch,
    Execute,
    collect_dp_compute_data_proto,
    dispatch_dp_compute,
    dispatch_dp_compute_data_proto,
    dispatch_dp_compute_data_proto_with_func,
    dispatch_one_to_all,
    get_predefined_dispatch_fn,
    make_nd_compute_dataproto_dispatch_fn,
    register,
    register_dispatch_mode,
    unpad_output,
    update_dispatch_mode,
)


class FakeWorkerGroup:
    """Just what the dispatch functions read: world size, mesh caches, the share hook."""

    def __init__(self, world_size: int, dp_ranks: list[int] | None = None, collect: list[bool] | None = None):
        self.world_size = world_size
        self._dispatch_info: dict = {}
        self._collect_info: dict = {}
        self._dp_ranks, self._collect = dp_ranks, collect
        self.queries = 0

    def _query_dispatch_info(self, mesh_name):
        self.queries += 1
        return self._dp_ranks

    def _query_collect_info(self, mesh_name):
        return self._collect

    def _share(self, obj):
        return obj


def test_register_stores_attrs_under_verl_magic_name_and_keeps_async():
    class W:
        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, execute_mode=Execute.RANK_ZERO, blocking=False)
        def sync_method(self, x):
            return x + 1

        @register()
        async def async_method(self, x):
            return x * 2

    attrs = getattr(W.sync_method, MAGIC_ATTR)
    assert MAGIC_ATTR == "attrs_3141562937"
    assert attrs == {"dispatch_mode": Dispatch.DP_COMPUTE_PROTO, "execute_mode": Execute.RANK_ZERO, "blocking": False}
    assert getattr(W.async_method, MAGIC_ATTR)["dispatch_mode"] is Dispatch.ALL_TO_ALL  # the default
    assert inspect.iscoroutinefunction(W.async_method)  # Ray must still see an async method
    assert W().sync_method(1) == 2
    import asyncio

    assert asyncio.run(W().async_method(3)) == 6


def test_materialize_futures_resolves_future_args_only_when_asked():
    from hybridrl.protocol import DataProtoFuture

    class W:
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def resolved(self, data, extra=None):
            return type(data).__name__, type(extra).__name__

        @register(dispatch_mode=Dispatch.ONE_TO_ALL, materialize_futures=False)
        def raw(self, data):
            return type(data).__name__

    def future():  # plain parts (no Ray refs): get() concatenates them
        return DataProtoFuture.concat([make_proto(2), make_proto(2)])

    assert W().resolved(future(), extra=future()) == ("DataProto", "DataProto")  # args and kwargs
    assert W().raw(future()) == "DataProtoFuture"


def test_register_rejects_bad_modes():
    with pytest.raises(TypeError, match="dispatch_mode"):
        register(dispatch_mode="DP_COMPUTE_PROTO")
    with pytest.raises(ValueError, match="collect_fn"):
        register(dispatch_mode={"dispatch_fn": lambda wg, *a, **k: (a, k)})
    with pytest.raises(TypeError, match="execute_mode"):
        register(execute_mode="ALL")


def test_dispatch_one_to_all_and_dp_compute():
    wg = FakeWorkerGroup(3)
    args, kwargs = dispatch_one_to_all(wg, 5, key="v")
    assert args == ([5, 5, 5],) and kwargs == {"key": ["v", "v", "v"]}
    args, kwargs = dispatch_dp_compute(wg, (1, 2, 3), k=[4, 5, 6])
    assert args == ([1, 2, 3],) and kwargs == {"k": [4, 5, 6]}  # tuples become lists (scattered)
    with pytest.raises(ValueError, match="world_size=3"):
        dispatch_dp_compute(wg, [1, 2])


def test_dp_compute_proto_chunks_evenly_and_concat_restores_order():
    wg = FakeWorkerGroup(2)
    (chunks,), kwargs = dispatch_dp_compute_data_proto(wg, make_proto(4))
    assert [c.batch["x"].tolist() for c in chunks] == [[0.0, 1.0], [2.0, 3.0]]
    assert PADDING_SIZE_KEY not in kwargs
    merged = collect_dp_compute_data_proto(wg, chunks)
    assert merged.batch["x"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_dp_compute_proto_auto_padding_and_unpad():
    wg = FakeWorkerGroup(4)
    data = make_proto(6, auto_padding=True)
    (chunks,), kwargs = dispatch_dp_compute_data_proto(wg, data)
    # 6 rows onto 4 workers: pad to 8 (8 - 6 = 2 pad rows, copies of rows 0 and 1), 2 rows each
    assert kwargs[PADDING_SIZE_KEY] == 2
    assert [len(c) for c in chunks] == [2, 2, 2, 2]
    assert chunks[3].batch["x"].tolist() == [0.0, 1.0]
    assert len(data) == 6  # the caller's batch is not padded in place
    out = unpad_output(collect_dp_compute_data_proto(wg, chunks), kwargs[PADDING_SIZE_KEY])
    assert out.batch["x"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert unpad_output([{"rank": 0}, {"rank": 1}], 2) == [{"rank": 0}, {"rank": 1}]  # per-worker lists stay


def test_dp_compute_proto_without_padding_names_the_fix():
    with pytest.raises(ValueError, match="VERL_AUTO_PADDING"):
        dispatch_dp_compute_data_proto(FakeWorkerGroup(4), make_proto(6))


def test_dp_compute_proto_with_func_replicates_the_function():
    def fn(worker, data):
        return data

    (funcs, chunks), _ = dispatch_dp_compute_data_proto_with_func(FakeWorkerGroup(2), fn, make_proto(2))
    assert funcs == [fn, fn] and [len(c) for c in chunks] == [1, 1]
    with pytest.raises(TypeError, match="function"):
        dispatch_dp_compute_data_proto_with_func(FakeWorkerGroup(2), make_proto(2))


def test_nd_dispatch_sends_dp_chunks_to_tp_replicas_and_collects_once():
    # 4 workers: dp=2 × tp=2; ranks 0,1 → dp 0; ranks 2,3 → dp 1; tp rank 0 collected
    wg = FakeWorkerGroup(4, dp_ranks=[0, 0, 1, 1], collect=[True, False, True, False])
    spec = make_nd_compute_dataproto_dispatch_fn("actor")
    (per_worker,), _ = spec["dispatch_fn"](wg, make_proto(4))
    assert [c.batch["x"].tolist() for c in per_worker] == [[0.0, 1.0], [0.0, 1.0], [2.0, 3.0], [2.0, 3.0]]
    outputs = [c.select(batch_keys=["x"]) for c in per_worker]
    merged = spec["collect_fn"](wg, outputs)
    assert merged.batch["x"].tolist() == [0.0, 1.0, 2.0, 3.0]  # replicas' duplicates dropped
    spec["dispatch_fn"](wg, make_proto(4))
    assert wg.queries == 1  # mesh info is cached on the group


def test_nd_dispatch_rejects_inconsistent_mesh():
    wg = FakeWorkerGroup(2, dp_ranks=[0, 1], collect=[True, False])
    with pytest.raises(ValueError, match="collected from exactly one worker"):
        make_nd_compute_dataproto_dispatch_fn("m")["dispatch_fn"](wg, make_proto(2))


def test_custom_dispatch_mode_registration_and_update():
    def first_half(wg, *args, **kwargs):
        return args, kwargs

    def collect_first(wg, output):
        return output[0]

    mode = register_dispatch_mode("TEST_CUSTOM_FIRST", first_half, collect_first)
    assert mode is Dispatch.TEST_CUSTOM_FIRST and "TEST_CUSTOM_FIRST" in Dispatch
    assert get_predefined_dispatch_fn(mode)["collect_fn"] is collect_first
    with pytest.raises(ValueError, match="already registered"):
        register_dispatch_mode("TEST_CUSTOM_FIRST", first_half, collect_first)
    update_dispatch_mode(mode, first_half, lambda wg, output: output[-1])
    assert get_predefined_dispatch_fn(mode)["collect_fn"](None, [1, 2]) == 2
    # members pickle by name, and an unknown name is re-created on unpickling (a Ray worker's view)
    assert pickle.loads(pickle.dumps(mode)) is mode
    Dispatch.remove("TEST_CUSTOM_FIRST")
    restored = pickle.loads(pickle.dumps(mode))
    assert restored.name == "TEST_CUSTOM_FIRST" and Dispatch.TEST_CUSTOM_FIRST is restored


def test_worker_group_binds_registered_methods_in_process():
    class LocalWorkerGroup(WorkerGroup):
        """Runs the 'workers' in-process: enough to check the bind → dispatch → collect chain."""

        def __init__(self, workers):
            super().__init__(resource_pool=None)
            self._workers = workers
            self._bind_worker_method(type(workers[0]))

        def _wait(self, method_name, output):
            return output

        def execute_all(self, method_name, *args, **kwargs):
            return [
                getattr(w, method_name)(*(a[i] for a in args), **{k: v[i] for k, v in kwargs.items()})
                for i, w in enumerate(self._workers)
            ]

    class Doubler(Worker):
        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
        def double(self, data):
            return DataProto.from_dict(tensors={"x": data.batch["x"] * 2})

    wg = LocalWorkerGroup([Doubler(), Doubler(), Doubler()])
    out = wg.double(make_proto(4, auto_padding=True))  # 4 rows on 3 workers: padded to 6, trimmed back
    assert out.batch["x"].tolist() == [0.0, 2.0, 4.0, 6.0]
    assert torch.equal(out.batch["x"], torch.arange(4, dtype=torch.float32) * 2)
