"""Count the package files one agent-loop request runs through, from ``AgentLoopManager`` to the engine and back.

The setup of ``tests/experimental/agent_loop/test_agent_loop_manager.py`` (the tiny model, ``rollout.mode=async``, the
hf engine and its continuous-batching server, ``single_turn_agent``) in one process: the Ray calls
(``AgentLoopManager`` → ``AgentLoopWorker`` → ``AsyncActorRolloutRefWorker``) become direct calls, so one profiler
sees every frame, including the server's engine thread. A warm-up call first imports whatever is imported lazily;
the measured call then records each ``hybridrl/`` source file a Python function of which runs:

- ``request``: the files between the manager and the engine and back (the manager, the agent-loop worker and loop,
  the server and the engine), without the ``wake_up`` / ``sleep`` around them (weight sync, memory release);
- ``call``: the whole ``AgentLoopManager.generate_sequences`` call, ``wake_up`` and ``sleep`` included;
- ``sampling_resolutions``: how many times the request's sampling settings are worked out (``RESOLVERS``).

Run with the checkout to measure first on ``PYTHONPATH`` (its ``tests/`` helpers build the config)::

    PYTHONPATH=/path/to/checkout python scripts/dev/trace_agent_request.py [--files]

Prints JSON: the counts, and with ``--files`` the files themselves.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# ---------------------------------------------------------------------------- in-process stand-ins for Ray


def _resolve(value: Any) -> Any:
    return asyncio.run(value) if inspect.iscoroutine(value) else value


class _Method:
    def __init__(self, owner: _Handle, name: str) -> None:
        self.owner, self.name = owner, name

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.owner.instance, self.name)(*args, **kwargs)
        if self.name in ("wake_up", "sleep") and _TRACER.skip_wake_sleep:  # outside the request: not recorded
            with _TRACER.paused():
                return _resolve(result)
        return result  # a coroutine the caller awaits (or ``ray.get`` runs)


class _Handle:
    """A Ray actor handle over an object in this process: ``handle.method.remote(...)``."""

    def __init__(self, instance: Any) -> None:
        self.instance = instance

    def __getattr__(self, name: str) -> _Method:
        return _Method(self, name)


class _ActorClass:
    def __init__(self, cls: type) -> None:
        self.cls = cls

    def options(self, **_: Any) -> _ActorClass:
        return self

    def remote(self, *args: Any, **kwargs: Any) -> _Handle:
        return _Handle(self.cls(*args, **kwargs))


RAY = SimpleNamespace(remote=_ActorClass, get=lambda refs: [_resolve(r) for r in refs])


# ---------------------------------------------------------------------------- the profiler


class _Tracer:
    """Records the ``package_dir`` files whose functions run while recording (all threads)."""

    def __init__(self) -> None:
        self.package_dir = ""
        self.files: set[str] = set()
        self.resolutions = 0
        self.recording = False
        self.skip_wake_sleep = True
        self._pause_depth = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" and self.recording and not self._pause_depth:
            filename = frame.f_code.co_filename
            if filename.startswith(self.package_dir):
                self.files.add(os.path.relpath(filename, os.path.dirname(self.package_dir)))
                caller = frame.f_back.f_code.co_name if frame.f_back is not None else ""
                if frame.f_code.co_name in RESOLVERS and caller not in RESOLVERS:
                    self.resolutions += 1

    def paused(self) -> Any:
        tracer = self

        class _Paused:
            def __enter__(self) -> None:
                tracer._pause_depth += 1

            def __exit__(self, *exc: Any) -> None:
                tracer._pause_depth -= 1

        return _Paused()

    def record(self, fn: Any) -> set[str]:
        self.files, self.resolutions, self.recording = set(), 0, True
        threading.setprofile(self)
        sys.setprofile(self)
        try:
            fn()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
            self.recording = False
        return set(self.files)


_TRACER = _Tracer()
# the functions that work out a request's sampling settings, before and after hybridrl.generation (a call from one
# of them to another, e.g. a view calling the resolver, counts once)
RESOLVERS = {"call_sampling_params", "resolve_request_params", "resolve_sampling_params", "resolve_sampling"}


# ---------------------------------------------------------------------------- the setup of the manager test


def _single_rank_env() -> None:
    from hybridrl.utils.ports import free_port

    env = {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "HYBRIDRL_DEVICE": "cpu"}
    os.environ.update(env, MASTER_PORT=str(free_port()))


def _batch(tokenizer: Any) -> Any:
    """One chat row in the RL dataset's layout (left-padded ids + the raw messages), sampled (not greedy)."""
    import numpy as np
    import torch

    from hybridrl.protocol import DataProto
    from hybridrl.utils.torch_functional import compute_position_id_with_mask

    messages = [{"role": "user", "content": "what is 3 plus 4"}]
    ids = tokenizer.encode(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False), add_special_tokens=False
    )
    attention_mask = torch.ones((1, len(ids)), dtype=torch.long)
    raw = np.empty(1, dtype=object)
    raw[:] = [messages]
    return DataProto.from_dict(
        tensors={
            "input_ids": torch.tensor([ids]),
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
        },
        non_tensors={"raw_prompt": raw},
        meta_info={"global_steps": 1},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", action="store_true", help="list the files too")
    args = parser.parse_args()

    import hybridrl

    checkout = Path(hybridrl.__file__).resolve().parents[1]  # the measured checkout's test helpers build the config
    sys.path[:0] = [str(checkout), str(checkout / "tests")]
    import hybridrl.experimental.agent_loop.manager as manager_module
    from hybridrl.experimental.agent_loop import AgentLoopManager

    try:  # the tiny test model's builder moved to hybridrl.models; the "before" checkout has it in utils
        from hybridrl.models.tiny import build_tiny_model
    except ImportError:
        from hybridrl.utils.tiny_model import build_tiny_model
    from hybridrl.workers.async_actor_rollout_ref_worker import AsyncActorRolloutRefWorker
    from tests.workers.fsdp_workers_testlib import ppo_config

    _TRACER.package_dir = str(Path(hybridrl.__file__).resolve().parent)
    _single_rank_env()
    model_dir = str(build_tiny_model(Path(tempfile.mkdtemp(prefix="trace_agent_request_"))))
    config = ppo_config(
        model_dir,
        "actor_rollout_ref.rollout.mode=async",
        "data.return_raw_chat=True",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.prompt_length=64",
        "actor_rollout_ref.rollout.response_length=8",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
    )
    worker = AsyncActorRolloutRefWorker(config=config.actor_rollout_ref, role="actor_rollout")
    worker.init_model()
    manager_module.ray = RAY  # the manager's Ray calls run in this process
    manager = AgentLoopManager(config, SimpleNamespace(workers=[_Handle(worker)], world_size=1))
    tokenizer = manager.agent_loop_workers[0].instance.tokenizer
    manager.generate_sequences(_batch(tokenizer))  # warm-up: lazy imports, first-call set-up

    request = _TRACER.record(lambda: manager.generate_sequences(_batch(tokenizer)))
    resolutions = _TRACER.resolutions
    _TRACER.skip_wake_sleep = False
    with_wake_sleep = _TRACER.record(lambda: manager.generate_sequences(_batch(tokenizer)))
    result: dict[str, Any] = {
        "hybridrl": _TRACER.package_dir,
        "request_files": len(request),
        "call_files": len(with_wake_sleep),
        "sampling_resolutions": resolutions,
    }
    if args.files:
        result["request"] = sorted(request)
        result["call_only"] = sorted(with_wake_sleep - request)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
