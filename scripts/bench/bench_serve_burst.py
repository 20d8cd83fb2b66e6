"""A burst of abandoned requests against ``python -m hybridrl.serve``, and the bad requests that must be 400s.

    python scripts/bench/bench_serve_burst.py --model ~/.cache/hybridrl/smollm2-135m-instruct \\
        [--requests 50 --n 16 --max-tokens 256 --client-timeout 20] [--code-root /path/to/a/checkout] \\
        [--set rollout.max_num_batched_tokens=1024 ...]

Starts the server (hf engine on the CPU, ``rollout.prompt_length=4096``) from ``--code-root`` (default: this
checkout), measures its idle memory (RSS after one warm-up request), then sends ``--requests`` concurrent chat
requests of ``n`` × ``max_tokens`` whose clients give up after ``--client-timeout`` seconds, and reports: the
status codes the burst got, how long after the clients left a fresh 4-token request was answered, the server's
memory then and ``--settle`` seconds later against its idle size, and how long SIGTERM took to stop it. Then
the bad requests (a prompt beyond the model's context, a seed beyond int64, an invalid tool schema) on a fresh
server: status, message, seconds. One JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


def _start(args: argparse.Namespace, port: int, log_path: Path) -> subprocess.Popen:
    command = [
        *(sys.executable, "-m", "hybridrl.serve", f"model.path={args.model}", "trainer.device=cpu", "rollout.name=hf"),
        *("rollout.dtype=float32", "rollout.prompt_length=4096", f"rollout.response_length={args.max_tokens}"),
        *(f"server.port={port}", "server.model_name=m", f"hydra.run.dir={log_path.parent}/hydra-{port}"),
        *args.set,
    ]
    env = {**os.environ, "PYTHONPATH": str(args.code_root)}
    process = subprocess.Popen(
        command, cwd=log_path.parent, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise TimeoutError("the server did not start")


def _chat(port: int, timeout: float, **fields) -> httpx.Response:
    body = {"model": "m", "messages": MESSAGES, **fields}
    return httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=timeout)


async def _burst(port: int, requests: int, n: int, max_tokens: int, client_timeout: float) -> collections.Counter:
    async def one(http: httpx.AsyncClient) -> str:
        body = {"model": "m", "messages": MESSAGES, "n": n, "max_tokens": max_tokens}
        try:
            return str((await http.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)).status_code)
        except httpx.TimeoutException:
            return "client timed out"

    limits = httpx.Limits(max_connections=requests + 1)
    async with httpx.AsyncClient(timeout=client_timeout, limits=limits) as http:
        return collections.Counter(await asyncio.gather(*(one(http) for _ in range(requests))))


def _rss_mib(process: subprocess.Popen) -> float:
    return psutil.Process(process.pid).memory_info().rss / 2**20


def _stop(process: subprocess.Popen) -> float:
    """Seconds SIGTERM takes to stop the server (killed after 120 s)."""
    start = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return round(time.monotonic() - start, 2)


def burst(args: argparse.Namespace, port: int, log_path: Path) -> dict:
    process = _start(args, port, log_path)
    try:
        _chat(port, 120, max_tokens=4)  # warm-up
        idle = _rss_mib(process)
        statuses = asyncio.run(_burst(port, args.requests, args.n, args.max_tokens, args.client_timeout))
        left = time.monotonic()
        try:
            fresh = _chat(port, 600, max_tokens=4)
            fresh_status = fresh.status_code
        except httpx.TimeoutException:
            fresh_status = "timed out after 600 s"
        answered_s = round(time.monotonic() - left, 2)
        after = _rss_mib(process)
        time.sleep(args.settle)
        settled = _rss_mib(process)
        # SIGTERM while a burst's requests are still running (clients kept waiting)
        pending = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import httpx; httpx.post('http://127.0.0.1:{port}/v1/chat/completions', "
                f"json={{'model': 'm', 'messages': {MESSAGES!r}, 'n': {args.n}, 'max_tokens': {args.max_tokens}}}, "
                "timeout=600)",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(3)
        stop_s = _stop(process)
        pending.kill()
    finally:
        if process.poll() is None:
            process.kill()
    return {
        "burst": f"{args.requests} x n={args.n}, max_tokens={args.max_tokens}, client timeout {args.client_timeout} s",
        "statuses": dict(statuses),
        "fresh_request": {"status": fresh_status, "seconds_after_clients_left": answered_s},
        "rss_mib": {
            "idle": round(idle, 1),
            "after_fresh_request": round(after, 1),
            f"after_{args.settle}s": round(settled, 1),
            "ratio_to_idle": round(settled / idle, 3),
        },
        "sigterm_with_a_request_running_s": stop_s,
    }


BAD_REQUESTS = {
    # ~2000 tokens (the tiny tokenizer): over the tiny model's 1024 positions, under rollout.prompt_length=4096
    "prompt beyond the model's context": {"messages": [{"role": "user", "content": "seven " * 500}]},
    "seed beyond int64": {"seed": 2**64, "max_tokens": 4},
    "invalid tools JSON Schema": {
        "max_tokens": 4,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": "x"}}}],
    },
}


def bad_requests(args: argparse.Namespace, port: int, log_path: Path) -> dict:
    process = _start(args, port, log_path)
    results = {}
    try:
        for name, fields in BAD_REQUESTS.items():
            start = time.monotonic()
            reply = _chat(port, 600, **fields)
            message = reply.json().get("error", {}).get("message") if reply.status_code != 200 else "(answered)"
            results[name] = {
                "status": reply.status_code,
                "message": message[:300],
                "seconds": round(time.monotonic() - start, 2),
            }
    finally:
        _stop(process)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--code-root", type=Path, default=ROOT)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--client-timeout", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/bench_serve_burst"))
    parser.add_argument("--skip", choices=["burst", "bad"], default=None)
    parser.add_argument("--set", nargs="*", default=[], help="more serve overrides, e.g. rollout.max_num_seqs=64")
    args = parser.parse_args()
    args.model = os.path.expanduser(args.model)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    from hybridrl.utils.ports import free_port

    report = {"code_root": str(args.code_root)}
    if args.skip != "burst":
        report["burst"] = burst(args, free_port(), args.log_dir / "burst.log")
    if args.skip != "bad":
        report["bad_requests"] = bad_requests(args, free_port(), args.log_dir / "bad.log")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
