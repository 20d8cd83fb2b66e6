"""Placement across a simulated 2-node cluster (run in a subprocess: it needs its own ray.init)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "multinode_script.py")


@pytest.mark.slow
def test_two_nodes_get_stable_per_node_rank_order():
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=400, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"script failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result = json.loads(lines[0][len("RESULT ") :])
    worker_nodes = result["worker_nodes"]
    assert len(worker_nodes) == 2 and len(set(worker_nodes.values())) == 1  # two nodes, one shared IP
    first, second = sorted(worker_nodes)  # same IP: the node id breaks the tie
    for attempt in result["attempts"]:
        assert [w["node_id"] for w in attempt] == [first, first, second, second]
        assert [w["local_rank"] for w in attempt] == ["0", "1", "0", "1"]
    assert result["attempts"][0] == result["attempts"][1]
