"""Run in its own process (one process holds one ray.init): a simulated 2-node cluster.

Prints one JSON line: per attempt, each rank's node id and RAY_LOCAL_RANK, plus the node ids.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=2)  # exactly one 2-bundle STRICT_PACK group fits per node
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)  # the driver's resource view lags the nodes' registration
    from sc_testlib import EchoWorker, make_group, teardown

    attempts = []
    for _ in range(2):  # the same ranks land on the same nodes when the group is created again
        pool, wg = make_group(EchoWorker, [2, 2])
        ids = wg.identity()
        attempts.append([{"node_id": i["node_id"], "local_rank": i["env"]["RAY_LOCAL_RANK"]} for i in ids])
        teardown(pool, wg)
    nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")}
    print("RESULT " + json.dumps({"attempts": attempts, "worker_nodes": nodes}), flush=True)
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main()
