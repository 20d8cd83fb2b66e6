"""Run in its own process: ``init_ray`` a local cluster, run a task and an actor, then report the Ray
processes' listening sockets and whether clients with no token / a wrong token / the run's token get in.

Prints one line ``RESULT {json}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import ray

from hybridrl.utils.ray_utils import init_ray

# A client in its own process: join the cluster, run one task, print "JOINED".
_CLIENT = (
    "import ray, sys\n"
    "ray.init(address=sys.argv[1], log_to_driver=False)\n"
    "print('JOINED', ray.get(ray.remote(lambda: 41 + 1).remote()), flush=True)\n"
)


@ray.remote
class Counter:
    def add(self, x: int) -> int:
        return x + 1


def listening_sockets(pids: set[int]) -> list[list]:
    """``[pid, process name, ip, port]`` of every listening TCP socket owned by ``pids``."""
    found = []
    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids:
            found.append([conn.pid, psutil.Process(conn.pid).name(), conn.laddr.ip, conn.laddr.port])
    return found


def start_client(gcs_address: str, auth_env: dict[str, str]) -> subprocess.Popen:
    """Start :data:`_CLIENT` with ``auth_env`` replacing every RAY_AUTH_* variable.

    The client is a local process (it resolves its node address to loopback, as the cluster does).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(auth_env, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    return subprocess.Popen([sys.executable, "-c", _CLIENT, gcs_address], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def client_outcome(proc: subprocess.Popen, timeout_s: float) -> dict:
    """``joined`` (it ran a task), ``rc`` (None: killed after ``timeout_s``) and the output's tail."""
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        return {"joined": False, "rc": None, "tail": output[-600:]}
    return {"joined": "JOINED 42" in output, "rc": proc.returncode, "tail": output[-600:]}


def main() -> None:
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
        os.environ.pop(name, None)
    init_ray({"num_cpus": 4}, "cpu")
    counter = Counter.remote()
    assert ray.get(counter.add.remote(1)) == 2
    assert ray.get(ray.remote(lambda: os.getpid()).remote()) > 0
    pids = {os.getpid()} | {p.pid for p in psutil.Process().children(recursive=True)}
    gcs_address = ray.get_runtime_context().gcs_address
    token = os.environ.get("RAY_AUTH_TOKEN")
    result = {
        "gcs_address": gcs_address,
        "sockets": listening_sockets(pids),
        "auth_mode": os.environ.get("RAY_AUTH_MODE"),
        "token_len": len(token or ""),
    }
    clients = {
        "no_token": start_client(gcs_address, {"RAY_AUTH_MODE": "disabled"}),
        "wrong_token": start_client(gcs_address, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}),
        "right_token": start_client(gcs_address, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token or ""}),
    }
    result.update({name: client_outcome(proc, timeout_s=120) for name, proc in clients.items()})
    ray.shutdown()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
