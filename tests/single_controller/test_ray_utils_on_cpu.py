"""init_ray: the kwargs it builds, and (in a subprocess) a full start → worker group → shutdown cycle."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hybridrl.utils.ray_utils import MIN_LOCAL_LOGICAL_CPUS, ray_init_kwargs


def test_local_cpu_cluster_gets_enough_logical_cpus_and_a_private_dashboard(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    kwargs = ray_init_kwargs({"num_cpus": None}, "cpu", env_vars={"A": "1"})
    assert kwargs["num_cpus"] == MIN_LOCAL_LOGICAL_CPUS  # 2 cores, but colocated actors must fit
    assert kwargs["include_dashboard"] is False and kwargs["dashboard_host"] == "127.0.0.1"
    assert kwargs["runtime_env"]["env_vars"]["A"] == "1"
    assert "RAY_AUTH_MODE" not in kwargs["runtime_env"]["env_vars"]  # auth is set in init_ray's environment
    assert ray_init_kwargs({"num_cpus": 4}, "cpu")["num_cpus"] == 4  # an explicit ray_init.num_cpus wins
    assert ray_init_kwargs(None, "cpu", min_num_cpus=40)["num_cpus"] == 40
    assert "num_cpus" not in ray_init_kwargs({"num_cpus": None}, "cuda")  # GPU box: Ray counts its cores
    assert ray_init_kwargs({"include_dashboard": True}, "cpu")["include_dashboard"] is True


def test_local_cpu_workers_run_at_the_drivers_priority(monkeypatch, ray_cluster):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    assert ray_init_kwargs(None, "cpu")["_system_config"] == {"worker_niceness": 0}
    assert "_system_config" not in ray_init_kwargs(None, "cuda")  # GPU box: Ray's default
    monkeypatch.setenv("RAY_worker_niceness", "10")
    assert "_system_config" not in ray_init_kwargs(None, "cpu")  # the user's own setting wins

    @ray_cluster.remote
    def niceness() -> int:
        return os.nice(0)

    # the session's cluster, started by init_ray from this process (Ray's default: this process's niceness + 15)
    assert ray_cluster.get(niceness.remote()) == os.nice(0)


def test_existing_cluster_is_joined_as_is(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    kwargs = ray_init_kwargs({"address": "auto", "num_cpus": 8}, "cuda")
    assert kwargs == {"address": "auto", "runtime_env": {"env_vars": {}}}  # num_cpus is not allowed when joining
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert ray_init_kwargs(None, "cpu")["address"] == "ray://head:10001"


@pytest.mark.slow
def test_init_worker_group_shutdown_leaves_no_processes():
    script = os.path.join(os.path.dirname(__file__), "shutdown_script.py")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"script failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result = json.loads(lines[0][len("RESULT ") :])
    assert result["logical_cpus"] >= MIN_LOCAL_LOGICAL_CPUS or result["logical_cpus"] >= os.cpu_count()
    assert result["env"]["env_vars"]["MY_FLAG"] == "1"
    assert result["kwargs"]["dashboard_host"] == "127.0.0.1"
    assert len(result["pids"]) == 2 and result["children"] >= 4  # gcs, raylet, ... and the two workers
    assert result["alive"] == [], f"processes left after ray.shutdown(): {result['alive']}"


def test_parallel_put_keeps_order_with_default_and_explicit_threads(ray_cluster):
    from hybridrl.utils.ray_utils import parallel_put

    data = [1, "hello", {"a": 2}, [3, 4]]
    assert ray_cluster.get(parallel_put(data)) == data
    many = list(range(40))  # more items than the default 16 threads
    assert ray_cluster.get(parallel_put(many, max_workers=4)) == many
    assert ray_cluster.get(parallel_put(many)) == many
    with pytest.raises(AssertionError, match="must not be empty"):
        parallel_put([])


def test_ray_noset_visible_devices():
    from hybridrl.utils.ray_utils import ray_noset_visible_devices

    assert not ray_noset_visible_devices({})
    assert not ray_noset_visible_devices({"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": ""})
    assert ray_noset_visible_devices({"RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES": "1"})


def test_token_auth_is_generated_per_run_and_an_explicit_user_mode_is_kept(monkeypatch):
    from hybridrl.utils import ray_security

    refreshed = []
    monkeypatch.setattr(ray_security, "_refresh_ray_auth_caches", lambda: refreshed.append(True))
    monkeypatch.setattr(ray_security, "_generated_token", None)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's explicit choice is respected
    assert ray_security.enable_local_token_auth() is None and os.environ["RAY_AUTH_MODE"] == "disabled"
    monkeypatch.delenv("RAY_AUTH_MODE")
    if not ray_security.ray_supports_token_auth():
        pytest.skip("the installed Ray has no token auth")
    first = ray_security.enable_local_token_auth()
    assert os.environ["RAY_AUTH_MODE"] == "token" and os.environ["RAY_AUTH_TOKEN"] == first and len(first) == 64
    second = ray_security.enable_local_token_auth()  # a later run in the same process: a new token
    assert second != first and os.environ["RAY_AUTH_TOKEN"] == second and len(refreshed) == 2
    monkeypatch.setenv("RAY_AUTH_TOKEN", "my-own-token")  # a token the user set is kept
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert ray_security.enable_local_token_auth() == "my-own-token"


def test_loopback_only_node_resolves_loopback_inside_and_restores_after(monkeypatch):
    import ray
    from ray._private import ray_constants, services

    from hybridrl.utils.ray_security import loopback_only_node

    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    before = ray_constants.ENABLE_RAY_CLUSTER
    with loopback_only_node():
        assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"  # for the daemons ray.init starts
        if not ray.is_initialized():  # (an initialized process answers with its node's address)
            assert services.get_node_ip_address() == "127.0.0.1"
    assert ray_constants.ENABLE_RAY_CLUSTER == before and "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ
