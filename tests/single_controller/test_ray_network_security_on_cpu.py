"""The local cluster init_ray starts listens on loopback only and refuses clients without the run's token.

Issue 21 finding 2: before, the GCS, raylet, workers and agents listened on all interfaces with token
auth disabled, and a client connecting to the machine's address ran a remote task.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

import pytest

from hybridrl.utils import ray_security


def _is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def _run_network_script() -> dict:
    script = os.path.join(os.path.dirname(__file__), "ray_network_script.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=500, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"script failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[0][len("RESULT "):])


@pytest.mark.skipif(not ray_security.ray_supports_token_auth(), reason="the installed Ray has no token auth")
def test_local_cluster_listens_on_loopback_only_and_refuses_clients_without_the_token():
    result = _run_network_script()
    names = {name for _, name, _, _ in result["sockets"]}
    assert {"gcs_server", "raylet"} <= names, f"Ray's servers not found among {result['sockets']}"
    assert any(name.startswith("ray::") for name in names)  # the workers (task and actor) listen too
    exposed = [sock for sock in result["sockets"] if not _is_loopback(sock[2])]
    assert exposed == [], f"Ray processes listening on non-loopback addresses: {exposed}"
    assert result["gcs_address"].startswith("127.0.0.1:")
    assert result["auth_mode"] == "token" and result["token_len"] == 64
    for refused in ("no_token", "wrong_token"):
        outcome = result[refused]
        assert not outcome["joined"] and outcome["rc"] not in (0, None), outcome
        assert "token-auth" in outcome["tail"], outcome["tail"]  # refused by authentication, not a timeout
    assert result["right_token"]["joined"], result["right_token"]  # the same client with the token gets in
