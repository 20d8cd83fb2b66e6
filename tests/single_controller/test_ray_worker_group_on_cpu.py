"""RayWorkerGroup on a real local Ray cluster: creation, environment, every dispatch mode, futures."""

from __future__ import annotations

import time

import pytest
import ray
from sc_testlib import AsyncWorker, EchoWorker, MeshWorker, make_group, make_proto, teardown

from hybridrl.single_controller.base.decorator import Dispatch, register, register_dispatch_mode
from hybridrl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup


@pytest.fixture(scope="module")
def echo3_pool_and_group(ray_cluster):
    """3 EchoWorkers (offset 0.5, ``worker_env`` EXTRA=yes) on one CPU node, in bundles that take a second worker."""
    pool, wg = make_group(EchoWorker, [3], 0.5, name_prefix="echo3_", max_colocate_count=2, worker_env={"EXTRA": "yes"})
    yield pool, wg
    teardown(pool, wg)


@pytest.fixture
def echo3(echo3_pool_and_group):
    return echo3_pool_and_group[1]


def test_workers_get_rank_world_size_and_rendezvous_env(echo3):
    ids = echo3.identity()
    assert [i["rank"] for i in ids] == [0, 1, 2] and {i["world_size"] for i in ids} == {3}
    envs = [i["env"] for i in ids]
    assert [e["RANK"] for e in envs] == ["0", "1", "2"]
    assert [e["RAY_LOCAL_RANK"] for e in envs] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in envs} == {"3"} and {e["RAY_LOCAL_WORLD_SIZE"] for e in envs} == {"3"}
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs}) == 1 and envs[0]["MASTER_PORT"].isdigit()
    assert {e["WG_PREFIX"] for e in envs} == {"echo3_"} and {e["WG_BACKEND"] for e in envs} == {"ray"}
    assert {e["HYBRIDRL_DEVICE"] for e in envs} == {"cpu"} and {i["device"] for i in ids} == {"cpu"}
    assert len({i["pid"] for i in ids}) == 3  # one process per worker
    assert echo3.world_size == 3
    assert echo3.worker_names == ["echo3_EchoWorker_0:0", "echo3_EchoWorker_0:1", "echo3_EchoWorker_0:2"]


def test_one_to_all_all_to_all_dp_compute(echo3):
    assert echo3.add_rank(10) == [10, 11, 12]  # ONE_TO_ALL: same arg, rank added
    assert echo3.all_to_all([1, 2, 3]) == [10, 21, 32]  # a world-size list is scattered: 1*10+0, 2*10+1, 3*10+2
    assert echo3.all_to_all(7) == [70, 71, 72]  # a scalar is broadcast
    assert echo3.dp_compute([1, 2, 3]) == [100, 201, 302]
    with pytest.raises(ValueError, match="world_size=3"):
        echo3.dp_compute([1, 2])


def test_dp_compute_proto_even_and_auto_padded(echo3):
    out = echo3.double(make_proto(6))
    # y = 2x + 0.5; rows 0-1 on rank 0, 2-3 on rank 1, 4-5 on rank 2
    assert out.batch["y"].tolist() == [0.5, 2.5, 4.5, 6.5, 8.5, 10.5]
    assert out.batch["rank"].tolist() == [0, 0, 1, 1, 2, 2]
    padded = echo3.double(make_proto(7, auto_padding=True))
    # 7 rows → padded to 9 (2 pad rows), 3 per rank; the 2 pad rows are dropped again
    assert len(padded) == 7 and padded.batch["y"].tolist() == [2 * i + 0.5 for i in range(7)]
    assert padded.batch["rank"].tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert list(padded.non_tensor_batch["tag"]) == [f"row{i}" for i in range(7)]


def test_dp_compute_metric_returns_per_worker_list(echo3):
    metrics = echo3.row_count(make_proto(6))
    # chunks [0,1], [2,3], [4,5] → sums 1, 5, 9
    assert metrics == [
        {"rank": 0, "rows": 2, "sum": 1.0},
        {"rank": 1, "rows": 2, "sum": 5.0},
        {"rank": 2, "rows": 2, "sum": 9.0},
    ]


def test_rank_zero_execution_and_builtin_helpers(echo3):
    before = echo3.get_calls()
    assert echo3.only_rank_zero() == 0  # a single value, not a list
    after = echo3.get_calls()
    assert [a - b for a, b in zip(after, before)] == [1, 0, 0]
    assert echo3.execute_func_rank_zero(lambda a, b: a * b, 6, 7) == 42
    out = echo3.execute_with_func_generator(lambda worker, data: data, make_proto(3))
    assert out.batch["x"].tolist() == [0.0, 1.0, 2.0]
    assert echo3.execute_all_sync("add_rank", 1) == [1, 2, 3]
    assert echo3.execute_rank_zero_sync("add_rank", 5) == 5
    refs = echo3.execute_all_async("add_rank", [0, 100, 200])  # lists of world size are scattered
    assert ray.get(refs) == [0, 101, 202]


def test_async_methods_and_futures_between_async_methods(ray_cluster):
    pool, wg = make_group(AsyncWorker, [2])
    try:
        start = time.monotonic()
        assert wg.sleep_then_rank(0.5) == [0, 1]
        assert time.monotonic() - start < 5.0
        future = wg.double(make_proto(4))  # non-blocking
        out = wg.plus_one(future)  # awaited on the workers, not blocking their event loops
        # z = 2x + 1
        assert out.batch["z"].tolist() == [1.0, 3.0, 5.0, 7.0]
    finally:
        teardown(pool, wg)


def test_non_blocking_future_feeds_the_next_call(echo3):
    from hybridrl.protocol import DataProtoFuture

    future = echo3.double_async(make_proto(6))
    assert isinstance(future, DataProtoFuture)
    # passed straight into another call: chunked lazily, materialized on the workers
    out = echo3.y_plus_one(future)
    # z = (2x + 0.5) + 1
    assert out.batch["z"].tolist() == [2 * i + 1.5 for i in range(6)]
    padded_future = echo3.double_async(make_proto(5, auto_padding=True))
    # 5 rows padded to 6 for 3 workers; the future drops the pad row when materialized
    assert padded_future.get().batch["y"].tolist() == [2 * i + 0.5 for i in range(5)]


def test_custom_dispatch_mode_on_a_real_group(ray_cluster):
    def dispatch_reversed(wg, value):
        # worker i receives value[world_size - 1 - i]
        return ([value[wg.world_size - 1 - i] for i in range(wg.world_size)],), {}

    def collect_sum(wg, outputs):
        return sum(outputs)

    mode = register_dispatch_mode("TEST_REVERSED_SUM", dispatch_reversed, collect_sum)

    class ReverseWorker(EchoWorker):
        @register(dispatch_mode=mode)
        def times_rank_plus_one(self, value):
            return value * (self.rank + 1)

    pool, wg = make_group(ReverseWorker, [2])
    try:
        # worker 0 gets 20, worker 1 gets 10: 20*1 + 10*2 = 40
        assert wg.times_rank_plus_one([10, 20]) == 40
    finally:
        teardown(pool, wg)


def test_mesh_aware_dispatch_dp2_tp2(ray_cluster):
    pool, wg = make_group(MeshWorker, [4])
    try:
        out = wg.tagged(make_proto(4))
        # dp rank 0 (ranks 0,1) gets rows 0-1, dp rank 1 (ranks 2,3) rows 2-3; tp rank 0 is collected
        assert out.batch["x"].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert out.batch["rank"].tolist() == [0, 0, 2, 2]
        assert wg._dispatch_info["actor"] == [0, 0, 1, 1]
        assert wg._collect_info["actor"] == [True, False, True, False]
        padded = wg.tagged(make_proto(3, auto_padding=True))  # 3 rows on dp=2: padded to 4, trimmed
        assert padded.batch["x"].tolist() == [0.0, 1.0, 2.0]
    finally:
        teardown(pool, wg)


def test_worker_env_extends_but_cannot_override(echo3_pool_and_group):
    pool, wg = echo3_pool_and_group
    assert {i["env"]["EXTRA"] for i in wg.identity()} == {"yes"}
    with pytest.raises(ValueError, match="RANK"):
        RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(EchoWorker)), worker_env={"RANK": "3"})


def test_dispatch_mode_enum_is_extensible():
    assert {
        "ONE_TO_ALL",
        "ALL_TO_ALL",
        "DP_COMPUTE",
        "DP_COMPUTE_PROTO",
        "DP_COMPUTE_PROTO_WITH_FUNC",
        "DP_COMPUTE_METRIC",
        "RANK_ZERO",
    } <= {m.name for m in Dispatch}
