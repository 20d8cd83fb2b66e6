"""Serve a model over an OpenAI-compatible HTTP API: ``python -m hybridrl.serve model.path=... key=value ...``.

    configs/serve.yaml ──► tokenizer + rollout engine (rollout.name, standalone: loads model.path itself)
      ──► async token-in/token-out server (continuous batching: hf batcher, vLLM, SGLang)
      ──► hybridrl.serving.build_openai_app ──► uvicorn on server.host:server.port (127.0.0.1 by default)

Example (CPU, a tiny model)::

    python -m hybridrl.serve model.path=~/models/SmolLM2-135M-Instruct trainer.device=cpu rollout.name=hf \\
        rollout.dtype=float32 server.port=8000
    # then: openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused").chat.completions.create(...)

The prompt of a chat request is the chat template's rendering of its messages (``ChatTokens.prompt_ids``),
the same ids hybridrl's agent loop would send; responses carry the engine's own tokens and log-probs.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.config import ConfigError, ConfigProblem, hydra_entry, section_with_defaults

_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def check_serve_config(config: DictConfig) -> None:
    """Every problem of a serve config at once (ConfigError), before anything heavy is imported."""
    problems = []
    if not config.model.path:
        problems.append(ConfigProblem("model.path", "is required.", "pass model.path=/path/to/hf/model"))
    port = config.server.port
    if not isinstance(port, int) or not 0 <= port <= 65535:
        problems.append(ConfigProblem("server.port", f"must be a TCP port (0-65535), got {port!r}.", "e.g. 8000"))
    for key in ("max_request_bytes", "max_n", "max_inflight_sequences"):
        if (config.server[key] is not None or key != "max_inflight_sequences") and int(config.server[key]) < 1:
            problems.append(ConfigProblem(f"server.{key}", "must be >= 1.", f"set server.{key} to a positive int"))
    if float(config.server.shutdown_timeout_s) < 0:
        problems.append(ConfigProblem("server.shutdown_timeout_s", "must be >= 0.", "e.g. server.shutdown_timeout_s=5"))
    if int(config.rollout.tensor_model_parallel_size) != 1:
        problems.append(
            ConfigProblem(
                "rollout.tensor_model_parallel_size",
                "the async server runs one replica.",
                "set rollout.tensor_model_parallel_size=1",
            )
        )
    if problems:
        raise ConfigError(problems)


def served_model_name(config: DictConfig) -> str:
    """``server.model_name``, else the basename of ``model.path``."""
    return config.server.model_name or os.path.basename(os.path.normpath(os.path.expanduser(config.model.path)))


def serve_limits(config: DictConfig, rollout_config: DictConfig) -> Any:
    """The request bounds (``ServeLimits``) of ``config``, with the model's context (``max_position_embeddings``
    of ``model.path``'s config) so a prompt or ``max_tokens`` beyond it is a 400, never an engine error."""
    from hybridrl.serving import ServeLimits
    from hybridrl.workers.engine.model_loader import load_hf_config

    hf_config = load_hf_config(
        os.path.expanduser(config.model.path), trust_remote_code=bool(config.model.trust_remote_code)
    )
    context = getattr(hf_config, "max_position_embeddings", None)
    return ServeLimits.from_config(rollout_config, config.server, None if context is None else int(context))


def build_engine(config: DictConfig) -> tuple[Any, Any, DictConfig]:
    """``(engine, tokenizer, rollout_config)``: the standalone rollout engine of ``config`` (no actor)."""
    import torch

    from hybridrl.workers.engine.model_loader import build_tokenizer, load_hf_config
    from hybridrl.workers.rollout import build_rollout

    device = config.trainer.device
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("trainer.device=cuda but no CUDA device is available: pass trainer.device=cpu rollout.name=hf")
    if config.model.external_lib:
        import importlib

        importlib.import_module(config.model.external_lib)
    path = os.path.expanduser(config.model.path)
    trust = bool(config.model.trust_remote_code)
    tokenizer = build_tokenizer(path, trust_remote_code=trust, custom_chat_template=config.model.custom_chat_template)
    rollout_config = section_with_defaults(config.rollout, "actor_rollout_ref.rollout")
    model_config = section_with_defaults(config.model, "actor_rollout_ref.model")
    hf_config = load_hf_config(path, trust_remote_code=trust)
    engine = build_rollout(
        rollout_config, model_config, tokenizer=tokenizer, hf_config=hf_config, actor_module=None, device_name=device
    )
    return engine, tokenizer, rollout_config


def uvicorn_config(app: Any, config: DictConfig) -> Any:
    """uvicorn's config for ``app`` on ``server.host:server.port``; on Ctrl-C / SIGTERM the requests still running
    after ``server.shutdown_timeout_s`` are cancelled (with their generation: ``serving/admission.py``)."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=config.server.host,
        port=int(config.server.port),
        log_level=config.server.log_level,
        timeout_graceful_shutdown=float(config.server.shutdown_timeout_s),
    )


def run_server(config: DictConfig) -> None:
    """Build the engine and its async server, then serve the OpenAI API until interrupted (Ctrl-C, SIGTERM: requests
    still running after ``server.shutdown_timeout_s`` are cancelled with their generation)."""
    import uvicorn

    from hybridrl.serving import build_openai_app
    from hybridrl.utils.cpu_allocator import release_free_memory
    from hybridrl.workers.rollout.async_server import build_async_server

    engine, tokenizer, rollout_config = build_engine(config)
    server = build_async_server(engine, rollout_config, on_idle=release_free_memory)  # a burst's peak given back
    engine.wake()  # a no-op unless the engine was built asleep
    server.start()
    try:
        app = build_openai_app(
            server.generate,
            tokenizer,
            model_name=served_model_name(config),
            limits=serve_limits(config, rollout_config),
            api_key=config.server.api_key,
            tool_format=config.server.tool_format,
            chat_template_kwargs=OmegaConf.to_container(config.server.chat_template_kwargs, resolve=True),
        )
        host, port = config.server.host, int(config.server.port)
        if host not in _LOOPBACK_HOSTS and config.server.api_key is None:
            print(f"WARNING: serving on {host} without server.api_key: anyone who reaches it can use it", flush=True)
        print(f"serving {served_model_name(config)!r} at http://{host}:{port}/v1", flush=True)
        web = uvicorn.Server(uvicorn_config(app, config))
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the Ctrl-C it shut down on (as uvicorn.run)
            web.run()
        if not web.started:
            raise RuntimeError(f"the server could not listen on {host}:{port} (see uvicorn's error above)")
    finally:
        server.stop()


# unknown keys are reported with the closest valid key before Hydra runs
main = hydra_entry("serve", run_server, check=check_serve_config, override_keys="serve")


if __name__ == "__main__":
    main()
