"""Helpers for engine tests: a one-rank gloo group in-process, and N-rank runs in spawned processes."""

from __future__ import annotations

import io
import multiprocessing
import os
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from hybridrl.utils.ports import free_port

_DIST_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


@contextmanager
def single_rank_group() -> Iterator[None]:
    """A gloo process group of world size 1 in this process (reused if one already exists)."""
    if dist.is_initialized():
        assert dist.get_world_size() == 1, "another test left a multi-rank group behind"
        yield
        return
    saved = {key: os.environ.get(key) for key in _DIST_ENV}
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo")
    try:
        yield
    finally:
        dist.destroy_process_group()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _entry(rank: int, world_size: int, port: int, fn: Callable[..., Any], args: tuple, queue: Any) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank)
    )
    os.environ["HYBRIDRL_DEVICE"] = "cpu"
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo")
        result = fn(rank, world_size, *args)
        buffer = io.BytesIO()  # bytes, not shared-memory tensors: those vanish when this process exits
        torch.save(result, buffer)
        queue.put((rank, "ok", buffer.getvalue()))
    except BaseException:  # report the failure instead of hanging the parent
        queue.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 300.0) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` spawned gloo ranks; return results by rank.

    ``fn`` must be importable (module level). Results come back through a queue, so a crash at
    interpreter exit (seen with gloo on CPU) does not fail a run whose work finished.
    """
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world_size, port, fn, args, queue)) for r in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    try:
        for _ in range(world_size):
            rank, status, payload = queue.get(timeout=timeout)
            if status != "ok":
                raise RuntimeError(f"rank {rank} failed:\n{payload}")
            results[rank] = torch.load(io.BytesIO(payload), weights_only=False)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world_size)]


# ----------------------------------------------------------------------------- a tiny training setup

def fsdp_config(**values):
    """The shipped ``actor_rollout_ref.actor.fsdp_config`` section (``values`` override its keys)."""
    from config_testlib import compose_section

    return compose_section("actor_rollout_ref.actor.fsdp_config", **values)


def optim_config(**values):
    """The shipped ``actor_rollout_ref.actor.optim`` section with a 10-step cosine schedule (2 warmup steps)."""
    from config_testlib import compose_section

    schedule = {"lr": 1e-2, "lr_warmup_steps": 2, "total_training_steps": 10, "warmup_style": "cosine"}
    return compose_section("actor_rollout_ref.actor.optim", **{**schedule, "min_lr_ratio": 0.1, **values})


def build_training_setup(model_dir: str, strategy: str = "fsdp2", kind: str = "causal_lm") -> tuple:
    """``(module, optimizer, lr_scheduler, tokenizer)`` for ``model_dir`` wrapped with ``strategy``."""
    from hybridrl.workers.engine import apply_fsdp, build_lr_scheduler, build_optimizer, build_tokenizer, load_hf_model

    module, _ = load_hf_model(model_dir, kind=kind)
    module = apply_fsdp(module, fsdp_config(), strategy=strategy)
    optimizer = build_optimizer(module, optim_config())
    scheduler = build_lr_scheduler(optimizer, optim_config())
    return module, optimizer, scheduler, build_tokenizer(model_dir)


def token_batch(seed: int, batch: int = 2, length: int = 12) -> torch.Tensor:
    """Deterministic token ids ``[batch, length]`` in the tiny vocab."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(4, 500, (batch, length), generator=generator)


def train_step(module: Any, optimizer: Any, scheduler: Any, input_ids: torch.Tensor) -> float:
    """One LM step (dropout-free model, so the global RNG is only used by callers). Returns the loss."""
    from hybridrl.workers.engine import clip_grad_and_step

    module.train()
    loss = module(input_ids=input_ids, labels=input_ids).loss
    loss.backward()
    clip_grad_and_step(module, optimizer, max_norm=1.0)
    optimizer.zero_grad()
    scheduler.step()
    return float(loss.detach())
