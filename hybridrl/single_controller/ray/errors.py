"""Clear, bounded-time errors for worker groups on Ray.

Ray reports a dead actor (killed, OOM, exception in ``__init__``) as ``ActorDiedError`` and an
exception inside a method as ``RayTaskError`` carrying the worker's traceback. ``get_from_workers``
waits on the per-rank results with ``ray.wait`` so that the *first* failure surfaces at once (the
other ranks may be blocked in a collective with the dead one forever), and re-raises it as a
``WorkerGroupError`` that names the worker group, method, rank and actor.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import ray
from ray.exceptions import OutOfMemoryError, RayActorError, RayError, RayTaskError

# Sanity limits (seconds); generous because a generate/update call on a big model takes minutes.
DEFAULT_CALL_TIMEOUT_S = float(os.environ.get("HYBRIDRL_WG_CALL_TIMEOUT_S", 3 * 3600))
DEFAULT_READY_TIMEOUT_S = float(os.environ.get("HYBRIDRL_WG_READY_TIMEOUT_S", 300))
DEFAULT_PG_READY_TIMEOUT_S = float(os.environ.get("HYBRIDRL_PG_READY_TIMEOUT_S", 120))


class WorkerGroupError(RuntimeError):
    """A worker of a group failed: died, raised, or did not answer in time."""

    def __init__(self, message: str, *, wg_name: str, method_name: str, rank: int | None, cause: Any = None) -> None:
        super().__init__(message)
        self.wg_name = wg_name
        self.method_name = method_name
        self.rank = rank
        self.cause = cause


class ResourceUnavailableError(RuntimeError, ValueError):
    """The cluster cannot host what a resource pool or worker group asks for.

    Also a ``ValueError``, the type verl's ``ResourcePoolManager`` raises for the same condition.
    """


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


# What to change when Ray's memory monitor killed a worker (it names only Ray's own knobs).
HOST_OOM_HINT = (
    "the node ran out of host memory and Ray killed the worker. Per-worker memory grows with the tokens of one "
    "micro-batch: lower actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (with use_dynamic_bsz: "
    "ppo_max_token_len_per_gpu) and the log_prob_micro_batch_size_per_gpu keys, set "
    "actor_rollout_ref.model.enable_gradient_checkpointing=True, or shorten data.max_response_length"
)


def _is_host_oom(error: RayError) -> bool:
    """Ray's memory monitor killed the worker (a task's OutOfMemoryError, or an actor death that says so)."""
    text = str(error)
    return isinstance(error, OutOfMemoryError) or "running low on memory" in text or "Memory on the node" in text


def _describe_failure(error: RayError) -> str:
    if _is_host_oom(error):
        return f"{HOST_OOM_HINT}.\nRay's report ({type(error).__name__}): {error}"
    if isinstance(error, RayTaskError):
        return f"raised an exception; worker traceback:\n{_ANSI_ESCAPE.sub('', str(error))}"
    if isinstance(error, RayActorError):
        return f"worker process died ({type(error).__name__}): {error}"
    return f"failed ({type(error).__name__}): {error}"


def get_from_workers(
    refs: list[ray.ObjectRef],
    ranks: list[int],
    *,
    wg_name: str,
    method_name: str,
    worker_names: list[str],
    timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S,
) -> list[Any]:
    """``ray.get`` of one ref per rank, failing fast and clearly.

    Args:
        refs: one object ref per called worker.
        ranks: the global rank behind each ref (same length as ``refs``).
        worker_names: actor names indexed by global rank (for the message).
        timeout_s: overall limit; None waits forever.

    Raises:
        WorkerGroupError: naming the group, method, rank and cause of the first failure.
    """
    results: list[Any] = [None] * len(refs)
    pending = {ref: i for i, ref in enumerate(refs)}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=remaining, fetch_local=False)
        if not ready:
            late = sorted(ranks[i] for i in pending.values())
            raise WorkerGroupError(
                f"worker group '{wg_name}': method '{method_name}' did not finish within {timeout_s:.0f}s on "
                f"ranks {late} (set HYBRIDRL_WG_CALL_TIMEOUT_S or call_timeout_s to wait longer)",
                wg_name=wg_name,
                method_name=method_name,
                rank=late[0],
            )
        others = [r for r in pending if r not in ready]
        more = ray.wait(others, num_returns=len(others), timeout=0, fetch_local=False)[0] if others else []
        for ref in [*ready, *more]:
            i = pending.pop(ref)
            results[i] = _get_one(ref, ranks[i], wg_name, method_name, worker_names)
    return results


def _get_one(ref: ray.ObjectRef, rank: int, wg_name: str, method_name: str, worker_names: list[str]) -> Any:
    try:
        return ray.get(ref)
    except RayError as error:
        actor = worker_names[rank] if rank < len(worker_names) else "?"
        raise WorkerGroupError(
            f"worker group '{wg_name}': method '{method_name}' failed on rank {rank} (actor '{actor}'): "
            f"{_describe_failure(error)}",
            wg_name=wg_name,
            method_name=method_name,
            rank=rank,
            cause=error,
        ) from error
