"""Admission control over a real socket and the real engine (tiny model, hf batcher behind uvicorn): a burst past
``max_inflight_sequences`` is refused with 429 + Retry-After, the admitted requests whose clients time out have
their generation cancelled (the engine is left with no work), and a fresh request is answered at once after."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from hybridrl.config import compose_config
from hybridrl.serve import build_engine, serve_limits, served_model_name
from hybridrl.serving import build_openai_app
from hybridrl.utils.ports import free_port
from hybridrl.workers.rollout.async_server import build_async_server

BOUND = 8  # server.max_inflight_sequences
N = 4  # choices per request of the burst: two requests fit, the third is refused
MESSAGES = [{"role": "user", "content": "count to a thousand"}]


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    """``(base_url, app's limits, async server)``: ``hybridrl.serve``'s engine and app on a free port."""
    import uvicorn

    overrides = [
        *(f"model.path={tiny_model_dir}", "trainer.device=cpu", "rollout.name=hf", "rollout.dtype=float32"),
        *("rollout.response_length=900", "rollout.ignore_eos=True", "rollout.max_num_seqs=8"),
        f"server.max_inflight_sequences={BOUND}",
    ]
    config = compose_config("serve", overrides)
    engine, tokenizer, rollout_config = build_engine(config)
    server = build_async_server(engine, rollout_config)
    server.start()
    limits = serve_limits(config, rollout_config)
    app = build_openai_app(server.generate, tokenizer, model_name=served_model_name(config), limits=limits)
    port = free_port()
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    while not web.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", served_model_name(config), server
    web.should_exit = True
    thread.join(timeout=30)
    server.stop()


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


def test_a_burst_past_the_bound_is_refused_and_abandoned_work_is_cancelled(served):
    base_url, model, server = served
    first, second, refused = asyncio.run(_burst(base_url, model))
    assert first == second == "timed out"  # 900 tokens × 4 choices each: far from done in 1.5 s
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert error["code"] == "server_busy" and "server.max_inflight_sequences" in error["message"]

    disconnected = time.monotonic()
    while not _engine_idle(server):  # the engine drops a cancelled request at its next step
        assert time.monotonic() - disconnected < 5, "the engine kept generating for the disconnected clients"
        time.sleep(0.05)
    print(f"engine idle {time.monotonic() - disconnected:.2f} s after the disconnects")
    reply = httpx.post(f"{base_url}/v1/chat/completions", json=_chat(model, max_tokens=4, n=BOUND), timeout=10)
    print(f"fresh request answered {time.monotonic() - disconnected:.2f} s after the disconnects")
    assert reply.status_code == 200  # the whole bound is free again
    assert reply.json()["usage"]["completion_tokens"] == 4 * BOUND  # ignore_eos: 4 tokens each
