"""Run in its own process: init_ray on a 2-core-style local cluster, a worker group, shutdown, no strays.

Prints one JSON line with the ray.init kwargs, the worker PIDs and the Ray processes left alive.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psutil  # noqa: E402
import ray  # noqa: E402

from hybridrl.utils.ray_utils import init_ray  # noqa: E402


def main() -> None:
    kwargs = init_ray({"num_cpus": None}, "cpu", env_vars={"MY_FLAG": "1"})
    from sc_testlib import EchoWorker, make_group

    _, wg = make_group(EchoWorker, [2], max_colocate_count=3)
    pids = wg.pid()
    ray_children = [p.pid for p in psutil.Process().children(recursive=True)]
    logical_cpus = ray.cluster_resources().get("CPU")
    ray.shutdown()
    deadline = time.monotonic() + 20
    watched = set(pids) | set(ray_children)
    while time.monotonic() < deadline:
        alive = [p for p in watched if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            break
        time.sleep(0.5)
    result = {
        "kwargs": {k: v for k, v in kwargs.items() if k != "runtime_env"},
        "env": kwargs["runtime_env"],
        "pids": pids,
        "children": len(ray_children),
        "alive": alive,
        "logical_cpus": logical_cpus,
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
