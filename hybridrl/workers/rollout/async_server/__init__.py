"""Server-mode rollout (``rollout.mode=async``): a token-in/token-out server in front of each rollout engine.

    server = build_async_server(engine, rollout_config)   # engine: HFRollout | VLLMRollout | SGLangRollout
    server.start()                                        # after the weight sync
    output = await server.generate(request_id, prompt_ids, {"max_tokens": 64, "logprobs": True})
    server.stop()                                         # finishes the in-flight requests

- hf (``HFRollout`` and ``HFGenerateRollout``): hybridrl's continuous batcher (``hf_batcher.py``) on the
  engine's model, driven by one engine thread (``engine_loop.py``), with conversation prefix caching
  (``prefix_cache.py``: a conversation's next turn prefills only its new tokens; cleared on ``stop()``).
- vllm: the in-process engine's own continuous batching (``vllm_engine.py``), same engine thread.
- sglang: ``Engine.async_generate`` on a private event loop (``sglang_server.py``).

Requests are described in ``hybridrl.generation`` (``records.py``: keys, ``TokenOutput``; ``sampling.py``: how a
request's settings are resolved).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hybridrl.generation import REQUEST_KEYS, TokenOutput, resolve_request_params
from hybridrl.workers.rollout.async_server.engine_loop import AsyncRolloutServer, StepEngine, ThreadedStepServer


def build_async_server(
    engine: Any, rollout_config: Any, on_idle: Callable[[], Any] | None = None
) -> AsyncRolloutServer:
    """The async server for ``engine`` (a ``BaseRollout``), configured by ``actor_rollout_ref.rollout``;
    ``on_idle``: see ``ThreadedStepServer`` (the hf and vLLM engines).

    Raises:
        TypeError: an engine with no server implementation.
    """
    from hybridrl.workers.rollout.hf_rollout import HFRollout
    from hybridrl.workers.rollout.sglang_rollout import SGLangRollout
    from hybridrl.workers.rollout.vllm_rollout import VLLMRollout

    if isinstance(engine, HFRollout):
        from hybridrl.workers.rollout.async_server.hf_batcher import HFBatcher

        batcher = HFBatcher(
            engine,
            max_num_seqs=int(rollout_config.max_num_seqs),
            max_prefill_tokens=int(rollout_config.max_num_batched_tokens),
        )
        return ThreadedStepServer(engine, rollout_config, batcher, on_idle)
    if isinstance(engine, VLLMRollout):
        from hybridrl.workers.rollout.async_server.vllm_engine import VLLMStepEngine

        return ThreadedStepServer(engine, rollout_config, VLLMStepEngine(engine), on_idle)
    if isinstance(engine, SGLangRollout):
        from hybridrl.workers.rollout.async_server.sglang_server import SGLangAsyncServer

        return SGLangAsyncServer(engine, rollout_config)
    raise TypeError(
        f"no async server for rollout engine {type(engine).__name__}; rollout.mode=async supports the hf, "
        "hf_generate, vllm and sglang engines"
    )


__all__ = [
    "REQUEST_KEYS",
    "AsyncRolloutServer",
    "StepEngine",
    "ThreadedStepServer",
    "TokenOutput",
    "build_async_server",
    "resolve_request_params",
]
