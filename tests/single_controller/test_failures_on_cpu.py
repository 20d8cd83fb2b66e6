"""Failures surface on the driver quickly and clearly: dead workers, raising workers, unplaceable pools."""

from __future__ import annotations

import os
import signal
import time

import pytest
import ray
from sc_testlib import BrokenInitWorker, EchoWorker, make_group, teardown

from hybridrl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    ResourceUnavailableError,
    WorkerGroupError,
)
from hybridrl.trainer.ppo.roles import ResourcePoolManager, Role

# Ray notices a dead actor process within a few seconds; allow slack for a loaded 2-core machine.
FAILURE_DEADLINE_S = 30.0


def test_killed_worker_fails_the_next_and_the_running_call(ray_cluster):
    pool, wg = make_group(EchoWorker, [2], name_prefix="victim_")
    try:
        pids = wg.pid()
        running = wg.execute_all_async("sleep", 60)  # rank 0 keeps running while rank 1 dies
        os.kill(pids[1], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerGroupError) as info:
            wg._wait("sleep", running)
        assert time.monotonic() - start < FAILURE_DEADLINE_S  # not the 60 s of rank 0's sleep
        assert info.value.rank == 1 and "worker process died" in str(info.value)
        assert "victim_EchoWorker_0:1" in str(info.value)
        with pytest.raises(WorkerGroupError, match="rank 1"):
            wg.add_rank(0)
    finally:
        teardown(pool, wg)


def test_exception_in_worker_init_fails_creation(ray_cluster):
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
    start = time.monotonic()
    try:
        with pytest.raises(WorkerGroupError) as info:
            RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(BrokenInitWorker)), name_prefix="broken_")
        assert time.monotonic() - start < 60
        assert info.value.rank == 1 and info.value.method_name == "__init__"
        assert "cannot load the model on this rank" in str(info.value)
    finally:
        for name in ("broken_BrokenInitWorker_0:0",):
            try:
                ray.kill(ray.get_actor(name))
            except ValueError:
                pass
        pool.release()


def test_call_timeout_names_the_slow_ranks(ray_cluster):
    pool, wg = make_group(EchoWorker, [2], call_timeout_s=2.0)
    try:
        with pytest.raises(WorkerGroupError, match=r"did not finish within 2s on ranks \[0, 1\]"):
            wg.sleep(30)
    finally:
        teardown(pool, wg)


def test_unplaceable_pool_fails_before_waiting(ray_cluster):
    total_cpus = ray.cluster_resources().get("CPU", 0)
    pool = RayResourcePool([int(total_cpus) + 4], use_gpu=False, max_colocate_count=1, name_prefix="huge")
    start = time.monotonic()
    with pytest.raises(ResourceUnavailableError, match="resource pool 'huge'.*short by"):
        pool.get_placement_groups(device_name="cpu")
    assert time.monotonic() - start < 5.0
    gpu_pool = RayResourcePool([1], use_gpu=True, name_prefix="gpu_pool")
    with pytest.raises(ResourceUnavailableError, match="'GPU'"):
        gpu_pool.get_placement_groups(device_name="cuda")


def test_pool_that_fits_but_is_busy_waits_a_bounded_time(ray_cluster):
    holders = []
    for _ in range(4):  # take every free CPU (the free-resource view lags recent releases)
        time.sleep(1.0)
        free_cpus = int(ray.available_resources().get("CPU", 0))
        if free_cpus < 1:
            break
        holder = RayResourcePool(
            [free_cpus], use_gpu=False, max_colocate_count=1, name_prefix="holder", pg_ready_timeout_s=10
        )
        try:
            holder.get_placement_groups(device_name="cpu")
            holders.append(holder)
        except ResourceUnavailableError:
            pass
    try:
        busy = RayResourcePool([1], use_gpu=False, max_colocate_count=1, name_prefix="busy", pg_ready_timeout_s=3)
        start = time.monotonic()
        with pytest.raises(ResourceUnavailableError, match="resource pool 'busy'.*could not be placed within 3s"):
            busy.get_placement_groups(device_name="cpu")
        assert time.monotonic() - start < 15.0
    finally:
        for holder in holders:
            holder.release()


def test_pool_split_across_too_small_nodes_is_refused(ray_cluster):
    # one node only: two STRICT_PACK groups of 3 bundles fit, a single group bigger than the node does not
    node_cpus = max(n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"])
    pool = RayResourcePool([int(node_cpus) + 1], use_gpu=False, max_colocate_count=1, name_prefix="too_wide")
    with pytest.raises(ResourceUnavailableError, match="too_wide"):
        pool.get_placement_groups(device_name="cpu")


class TestOneSharedGroup:
    """Failures that leave the workers alive share one group of 2 processes."""

    @pytest.fixture(scope="class")
    def raiser(self, ray_cluster):
        """2 EchoWorkers, one per bundle (max_colocate_count=1), shared by the tests that leave them alive;
        built after the busy-pool test has released its holders (the free-CPU view lags releases)."""
        pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1, name_prefix="raiser")  # a name of its own
        wg = RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(EchoWorker)), name_prefix="raiser_")
        yield pool, wg
        teardown(pool, wg)

    def test_exception_in_worker_method_names_rank_and_carries_traceback(self, raiser):
        _, wg = raiser
        start = time.monotonic()
        with pytest.raises(WorkerGroupError) as info:
            wg.fail_on_rank(1)
        assert time.monotonic() - start < FAILURE_DEADLINE_S
        message = str(info.value)
        assert "worker group 'raiser_'" in message and "'fail_on_rank'" in message and "rank 1" in message
        assert "deliberate failure on rank 1" in message and "sc_testlib.py" in message, message
        assert info.value.rank == 1 and info.value.wg_name == "raiser_"
        assert wg.add_rank(0) == [0, 1]  # the workers survive a raising method

    def test_over_colocation_is_refused_instead_of_hanging(self, raiser):
        pool, _ = raiser  # its bundles already hold one worker each
        with pytest.raises(ResourceUnavailableError, match="max_colocate_count=1"):
            RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(EchoWorker)), name_prefix="second_")


def test_resource_pool_manager_preflight(ray_cluster):
    # sized on the cluster's total (not the momentary free count, which other tests' actors still shrink
    # while they are torn down): the reward pool alone could fit an idle cluster, not after the global pool
    total_cpus = int(ray.cluster_resources().get("CPU", 0))
    ok = ResourcePoolManager({"global_pool": [2]}, {Role.ActorRollout: "global_pool"}, use_gpu=False)
    ok.create_resource_pool()
    assert ok.get_n_gpus() == 2 and ok.get_resource_pool(Role.ActorRollout).store == [2]
    too_big = ResourcePoolManager(
        {"global_pool": [1], "reward_pool": [total_cpus]},
        {Role.ActorRollout: "global_pool", Role.RewardModel: "reward_pool"},
        use_gpu=False,
    )
    with pytest.raises(ValueError, match="reward_pool.*checked before it"):
        too_big.create_resource_pool()
    with pytest.raises(KeyError, match="critic"):
        ok.get_resource_pool(Role.Critic)
