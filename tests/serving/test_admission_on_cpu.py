"""Admission control over a real socket and the real engine (tiny model, hf batcher behind uvicorn): a burst past
``max_inflight_sequences`` is refused with 429 + Retry-After, the admitted requests whose clients time out have
their generation cancelled (the engine is left with no work), and a fresh request is answered at once after."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import httpx
import pytest
from omegaconf import OmegaConf

from hybridrl.config import compose_config
from hybridrl.serve import build_engine, serve_limits, served_model_name, uvicorn_config
from hybridrl.serving import build_openai_app
from hybridrl.utils.ports import free_port
from hybridrl.workers.rollout.async_server import build_async_server

BOUND = 8  # server.max_inflight_sequences
SHUTDOWN_TIMEOUT_S = 1
N = 4  # choices per request of the burst: two requests fit, the third is refused
MESSAGES = [{"role": "user", "content": "count to a thousand"}]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    """``(config, app, async server)``: ``hybridrl.serve``'s engine, server and app (no socket yet)."""
    overrides = [
        *(f"model.path={tiny_model_dir}", "trainer.device=cpu", "rollout.name=hf", "rollout.dtype=float32"),
        *("rollout.response_length=900", "rollout.ignore_eos=True", "rollout.max_num_seqs=8"),
        *(f"server.max_inflight_sequences={BOUND}", f"server.shutdown_timeout_s={SHUTDOWN_TIMEOUT_S}"),
    ]
    config = compose_config("serve", overrides)
    engine, tokenizer, rollout_config = build_engine(config)
    server = build_async_server(engine, rollout_config)
    server.start()
    limits = serve_limits(config, rollout_config)
    app = build_openai_app(server.generate, tokenizer, model_name=served_model_name(config), limits=limits)
    yield config, app, server
    server.stop()


@contextlib.contextmanager
def listening(engine):
    """``(base_url, model, async server, uvicorn server, its thread)``: the app on a free port (``serve``'s uvicorn
    config), stopped on exit."""
    import uvicorn

    config, app, server = engine
    config = OmegaConf.merge(config, {"server": {"port": free_port()}})
    web = uvicorn.Server(uvicorn_config(app, config))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    while not web.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{config.server.port}", served_model_name(config), server, web, thread
    finally:
        web.should_exit = True
        thread.join(timeout=30)


def _chat(model: str, **fields) -> dict:
    return {"model": model, "messages": MESSAGES, **fields}


async def _burst(base_url: str, model: str) -> list[httpx.Response | str]:
    """Three requests of ``N`` choices (one streamed) whose clients give up after 1.5 s."""

    async def one(http: httpx.AsyncClient, index: int) -> httpx.Response | str:
        await asyncio.sleep(0.3 * index)  # in order: the third finds the bound full
        try:
            return await http.post(f"{base_url}/v1/chat/completions", json=_chat(model, n=N, stream=index == 1))
        except httpx.TimeoutException:
            return "timed out"

    async with httpx.AsyncClient(timeout=1.5) as http:
        return await asyncio.gather(*(one(http, i) for i in range(3)))


def _engine_idle(server) -> bool:
    with server._wake:
        return not server._queue and not server.step_engine.has_work()


def _wait_until_idle(server, since: float, limit_s: float, what: str) -> None:
    while not _engine_idle(server):  # the engine drops a cancelled request at its next step
        assert time.monotonic() - since < limit_s, what
        time.sleep(0.05)


def test_a_burst_past_the_bound_is_refused_and_abandoned_work_is_cancelled(engine):
    with listening(engine) as (base_url, model, server, _, _):
        _burst_and_fresh_request(base_url, model, server)


def _burst_and_fresh_request(base_url, model, server):
    first, second, refused = asyncio.run(_burst(base_url, model))
    assert first == second == "timed out"  # 900 tokens × 4 choices each: far from done in 1.5 s
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert error["code"] == "server_busy" and "server.max_inflight_sequences" in error["message"]

    disconnected = time.monotonic()
    _wait_until_idle(server, disconnected, 5, "the engine kept generating for the disconnected clients")
    reply = httpx.post(f"{base_url}/v1/chat/completions", json=_chat(model, max_tokens=4, n=BOUND), timeout=10)
    assert reply.status_code == 200  # the whole bound is free again
    assert reply.json()["usage"]["completion_tokens"] == 4 * BOUND  # ignore_eos: 4 tokens each


def test_a_shutdown_cancels_the_requests_still_running_after_its_timeout(engine):
    with listening(engine) as (base_url, model, server, web, thread):
        waiting = threading.Thread(  # 8 × 900 tokens: far longer than the shutdown timeout
            target=lambda: httpx.post(f"{base_url}/v1/chat/completions", json=_chat(model, n=BOUND), timeout=60),
            daemon=True,
        )
        waiting.start()
        sent = time.monotonic()
        while _engine_idle(server):  # until the request reaches the engine
            assert time.monotonic() - sent < 10, "the request never reached the engine"
            time.sleep(0.05)
        asked = time.monotonic()
        web.should_exit = True  # what uvicorn's SIGTERM / SIGINT handler does
        thread.join(timeout=30)
        stopped_s = time.monotonic() - asked
    assert stopped_s < SHUTDOWN_TIMEOUT_S + 2
    _wait_until_idle(server, asked, SHUTDOWN_TIMEOUT_S + 3, "the request's generation outlived the shutdown")
