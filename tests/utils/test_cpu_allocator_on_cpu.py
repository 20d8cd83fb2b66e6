"""HYBRIDRL_CPU_ALLOCATOR: which allocator the CPU workers get, and that a Ray worker really runs with it."""

from __future__ import annotations

import os

import pytest

from hybridrl.utils.cpu_allocator import ENV_KEY, GLIBC_TUNED, choose_allocator, find_library
from hybridrl.utils.ray_utils import ray_init_kwargs


@pytest.fixture
def libdir(tmp_path):
    """A library folder holding an (empty) tcmalloc and jemalloc: only their names are looked at."""
    for name in ("libtcmalloc_minimal.so.4", "libjemalloc.so.2"):
        (tmp_path / name).write_bytes(b"")
    return (str(tmp_path),)


def test_auto_prefers_tcmalloc_and_keeps_an_existing_preload(libdir):
    choice = choose_allocator({"LD_PRELOAD": "/opt/libfoo.so"}, libdir)
    assert choice.name == "tcmalloc"
    assert choice.env["LD_PRELOAD"] == f"{libdir[0]}/libtcmalloc_minimal.so.4 /opt/libfoo.so"
    assert int(choice.env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) >= 1 << 40  # no "large alloc" lines
    assert "HYBRIDRL_CPU_ALLOCATOR=system" in choice.message


def test_auto_without_tcmalloc_tunes_glibc_and_names_the_package(tmp_path):
    choice = choose_allocator({}, (str(tmp_path),))
    assert choice.name == "glibc" and choice.env == {"GLIBC_TUNABLES": GLIBC_TUNED}
    assert "apt install libtcmalloc-minimal4" in choice.message
    assert "glibc.malloc.mmap_threshold=33554432" in GLIBC_TUNED  # glibc refuses thresholds above 32 MiB


def test_explicit_choices(libdir):
    assert choose_allocator({ENV_KEY: "jemalloc"}, libdir).env["LD_PRELOAD"].endswith("libjemalloc.so.2")
    assert choose_allocator({ENV_KEY: "glibc"}, libdir).env == {"GLIBC_TUNABLES": GLIBC_TUNED}
    assert choose_allocator({ENV_KEY: "system"}, libdir).env == {}
    assert choose_allocator({ENV_KEY: " TCMalloc "}, libdir).name == "tcmalloc"


def test_the_users_own_settings_are_never_replaced(libdir, tmp_path):
    mine = {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}
    assert choose_allocator(mine, libdir).env == {}  # already an allocator in LD_PRELOAD
    assert choose_allocator({**mine, ENV_KEY: "tcmalloc"}, libdir).name == "jemalloc"
    tuned = choose_allocator({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, (str(tmp_path / "none"),))
    assert tuned.env == {} and "your GLIBC_TUNABLES" in tuned.message


def test_bad_settings_name_the_key_and_the_fix(tmp_path):
    with pytest.raises(ValueError, match="HYBRIDRL_CPU_ALLOCATOR='mimalloc' is not one of auto, tcmalloc"):
        choose_allocator({ENV_KEY: "mimalloc"})
    with pytest.raises(ValueError, match="apt install libtcmalloc-minimal4"):
        choose_allocator({ENV_KEY: "tcmalloc"}, (str(tmp_path),))


def test_find_library_order(libdir, tmp_path):
    assert find_library("tcmalloc", (str(tmp_path / "missing"), *libdir)) == f"{libdir[0]}/libtcmalloc_minimal.so.4"
    assert find_library("tcmalloc", (str(tmp_path / "missing"),)) is None


def test_local_cpu_cluster_workers_get_the_allocator_env_and_run_env_vars_win(monkeypatch, libdir):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    choice = choose_allocator({}, libdir)
    kwargs = ray_init_kwargs(None, "cpu", env_vars={"A": "1", "LD_PRELOAD": "mine.so"}, allocator=choice)
    env = kwargs["runtime_env"]["env_vars"]
    assert env["A"] == "1" and env["LD_PRELOAD"] == "mine.so"
    assert env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"] == choice.env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]
    joined = ray_init_kwargs({"address": "auto"}, "cpu", allocator=choice)  # another cluster's nodes: untouched
    assert joined["runtime_env"]["env_vars"] == {}


def test_a_ray_worker_of_the_session_cluster_runs_with_the_chosen_allocator(ray_cluster):
    """The session cluster was started by ``init_ray(device="cpu")``: its workers carry the choice."""
    expected = choose_allocator({k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GLIBC_TUNABLES")})

    @ray_cluster.remote
    def inspect() -> tuple[dict[str, str], bool]:
        with open("/proc/self/maps") as maps:
            mapped = any(expected.name in line for line in maps)
        return {k: os.environ.get(k, "") for k in ("LD_PRELOAD", "GLIBC_TUNABLES")}, mapped

    env, mapped = ray_cluster.get(inspect.remote())
    if expected.name in ("tcmalloc", "jemalloc"):
        assert mapped, f"{expected.name} installed but not loaded in the Ray worker (LD_PRELOAD={env['LD_PRELOAD']!r})"
    else:
        assert env["GLIBC_TUNABLES"] == GLIBC_TUNED


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def test_release_free_memory_returns_a_freed_heap_to_the_system(monkeypatch):
    from hybridrl.utils.cpu_allocator import release_free_memory

    monkeypatch.delenv("LD_PRELOAD", raising=False)
    blocks = [bytearray(100_000) for _ in range(3000)]  # ~300 MB of heap blocks (below malloc's mmap threshold)
    pin = bytearray(100_000)  # allocated last: the heap's top stays in use, so free() alone trims nothing
    before = _rss_mib()
    del blocks
    assert release_free_memory() is True
    assert before - _rss_mib() > 200  # the freed blocks' pages are back with the system
    del pin


def test_release_free_memory_leaves_a_preloaded_allocator_alone(monkeypatch):
    from hybridrl.utils.cpu_allocator import release_free_memory

    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
    assert release_free_memory() is False
