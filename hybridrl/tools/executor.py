"""Run tool calls off the agent loop's event loop, with a timeout, turning every failure into a message.

Many conversations share one event loop; a tool that blocks (a subprocess, a sync HTTP call, CPU work)
would stall all of them. :class:`ToolExecutor` therefore runs each tool coroutine in a worker thread, in an
event loop of its own (``asyncio.run`` per call), and awaits the result from the caller's loop::

    caller loop ──call()──► thread pool ──► worker thread: asyncio.run(tool.execute(...))
        ▲                                               │
        └──────────── ToolCallResult ◄──────────────────┘   (or the timeout fires first)

Timeouts: ``config.timeout`` of the tool YAML entry (seconds), else :data:`DEFAULT_TOOL_TIMEOUT_S`. The time
spent waiting for a free worker counts. A timed-out async tool is cancelled; a blocking one cannot be, so
its thread stays busy until it returns (the caller has its error result already).

Because each call runs in its own event loop, a tool must not keep asyncio objects (locks, sessions)
across calls; thread-safe state (dicts, ``threading.Lock``) is fine.

verl 0.5 and 0.9 return shapes are both accepted: ``create`` → ``instance_id`` or
``(instance_id, response)``; ``execute`` → ``(ToolResponse | str | None, reward | None, metrics | None)``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from hybridrl.tools.base_tool import BaseTool
from hybridrl.tools.schemas import ToolResponse

logger = logging.getLogger(__name__)

# Default limit, in seconds, of one tool call (create/execute/release/calc_reward) when the tool's YAML
# `config` has no `timeout`. Generous for local tools; set `timeout` per tool for slow remote ones.
DEFAULT_TOOL_TIMEOUT_S = 30.0
# Default number of worker threads: conversations whose tool calls can run at the same time.
DEFAULT_MAX_WORKERS = 64


@dataclass(frozen=True)
class ToolCallResult:
    """Outcome of one tool call.

    Attributes:
        text: the tool's response text ("" when it gave none), or the error message.
        reward: the step reward the tool returned (0.0 on error).
        metrics: the tool's metrics ({} on error).
        error: None on success, else the reason (``"timed out after 2 s"``, ``"ValueError: ..."``).
        seconds: wall time of the call as the caller saw it.
    """

    text: str
    reward: float
    metrics: dict = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0


class ToolError(RuntimeError):
    """A create / calc_reward call failed or timed out; the message is the text for the model."""


class _TimedOut(Exception):
    """The tool's own loop hit the timeout (kept apart from a TimeoutError the tool raises itself)."""


def error_text(tool_name: str, reason: str) -> str:
    """The message the model reads when a tool call fails."""
    return f"Error when executing tool {tool_name}: {reason}"


def response_text(response: ToolResponse | str | None) -> str:
    """Text of a verl 0.9 ``ToolResponse``, a verl 0.5 ``str`` or ``None`` ("")."""
    if isinstance(response, ToolResponse):
        return response.text or ""
    return "" if response is None else str(response)


def create_arguments(create: Callable[..., Any], create_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``tool.create``: the row's ``create_kwargs`` spread as keywords (verl 0.5),
    plus ``create_kwargs=<dict>`` (verl 0.9) when the signature takes it or ``**kwargs``."""
    arguments = dict(create_kwargs)
    parameters = inspect.signature(create).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    if takes_any or "create_kwargs" in parameters:
        arguments.setdefault("create_kwargs", dict(create_kwargs))
    return arguments


def _instance_id(created: Any) -> str:
    return created[0] if isinstance(created, tuple) else created


def _execute_result(returned: Any, tool_name: str) -> tuple[str, float, dict]:
    if not isinstance(returned, tuple) or len(returned) != 3:
        raise TypeError(f"{tool_name}.execute returned {type(returned).__name__}, not (response, reward, metrics)")
    response, reward, metrics = returned
    return response_text(response), 0.0 if reward is None else float(reward), dict(metrics or {})


async def _within(awaitable: Awaitable[Any], timeout_s: float) -> Any:
    """``awaitable``'s result, or :class:`_TimedOut` (after cancelling it) when ``timeout_s`` passes first."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    finally:  # timed out, or the caller was cancelled: stop waiting for the call
        if not task.done():
            task.cancel()
    if not done:
        raise _TimedOut()
    return task.result()


def _run_in_own_loop(make_coroutine: Callable[[], Awaitable[Any]], timeout_s: float) -> Any:
    """Worker-thread body: run the coroutine in a new event loop, cancelling it at ``timeout_s``."""
    return asyncio.run(_within(make_coroutine(), timeout_s))


class ToolExecutor:
    """Runs tool coroutines in a thread pool (see the module docstring); safe to share between conversations.

    Args:
        max_workers: worker threads (:data:`DEFAULT_MAX_WORKERS`).
        default_timeout_s: limit of a call to a tool whose config has no ``timeout`` (:data:`DEFAULT_TOOL_TIMEOUT_S`).
    """

    def __init__(self, max_workers: int = DEFAULT_MAX_WORKERS, default_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S):
        self.default_timeout_s = default_timeout_s
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="hybridrl-tool")

    def timeout_for(self, tool: BaseTool) -> float:
        """Seconds allowed per call of ``tool``: its ``config.timeout``, else the executor's default."""
        timeout = (getattr(tool, "config", None) or {}).get("timeout")
        return self.default_timeout_s if timeout is None else float(timeout)

    async def _run(self, tool: BaseTool, make_coroutine: Callable[[], Awaitable[Any]]) -> Any:
        """The coroutine's result, run in a worker thread's own loop; raises what it raises or :class:`_TimedOut`."""
        timeout_s = self.timeout_for(tool)
        future = self._pool.submit(_run_in_own_loop, make_coroutine, timeout_s)
        # The same limit outside: a blocking tool never yields to its loop's timer.
        return await _within(asyncio.wrap_future(future), timeout_s)

    def _reason(self, tool: BaseTool, exc: BaseException) -> str:
        if isinstance(exc, _TimedOut):
            return f"timed out after {self.timeout_for(tool):g} s"
        return f"{type(exc).__name__}: {exc}"

    async def call(self, tool: BaseTool, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ToolCallResult:
        """``tool.execute(instance_id, parameters, **kwargs)`` off the loop; never raises (errors → result.error)."""
        start = time.perf_counter()
        try:
            returned = await self._run(tool, lambda: tool.execute(instance_id, parameters, **kwargs))
            text, reward, metrics = _execute_result(returned, tool.name)
        except Exception as exc:
            return self._failure(tool, exc, start)
        return ToolCallResult(text, reward, metrics, None, time.perf_counter() - start)

    async def call_once(
        self, tool: BaseTool, parameters: dict[str, Any], tool_kwargs: dict[str, Any] | None = None
    ) -> ToolCallResult:
        """create → execute → release in one worker call (verl 0.9's agent loop: an instance per call).

        ``tool_kwargs`` is the row's ``extra_info.tools_kwargs[tool.name]``: ``create_kwargs``,
        ``execute_kwargs``, ``release_kwargs``. One timeout covers the three. Never raises.
        """
        tool_kwargs = tool_kwargs or {}

        async def lifecycle() -> Any:
            created = await tool.create(**create_arguments(tool.create, tool_kwargs.get("create_kwargs") or {}))
            instance_id = _instance_id(created)
            try:
                return await tool.execute(instance_id, parameters, **(tool_kwargs.get("execute_kwargs") or {}))
            finally:
                await tool.release(instance_id, **(tool_kwargs.get("release_kwargs") or {}))

        start = time.perf_counter()
        try:
            text, reward, metrics = _execute_result(await self._run(tool, lifecycle), tool.name)
        except Exception as exc:
            return self._failure(tool, exc, start)
        return ToolCallResult(text, reward, metrics, None, time.perf_counter() - start)

    def _failure(self, tool: BaseTool, exc: BaseException, start: float) -> ToolCallResult:
        reason = self._reason(tool, exc)
        logger.warning("tool %s failed: %s", tool.name, reason)
        return ToolCallResult(error_text(tool.name, reason), 0.0, {}, reason, time.perf_counter() - start)

    async def create(
        self, tool: BaseTool, instance_id: str | None = None, create_kwargs: dict[str, Any] | None = None
    ) -> str:
        """``tool.create`` off the loop; the instance id (verl 0.5 and 0.9 shapes). Raises :class:`ToolError`."""
        arguments = create_arguments(tool.create, create_kwargs or {})
        try:
            return _instance_id(await self._run(tool, lambda: tool.create(instance_id, **arguments)))
        except Exception as exc:
            raise ToolError(error_text(tool.name, self._reason(tool, exc))) from exc

    async def calc_reward(self, tool: BaseTool, instance_id: str, **kwargs: Any) -> float:
        """``tool.calc_reward`` off the loop, as a float. Raises :class:`ToolError`."""
        try:
            return float(await self._run(tool, lambda: tool.calc_reward(instance_id, **kwargs)))
        except Exception as exc:
            raise ToolError(error_text(tool.name, self._reason(tool, exc))) from exc

    async def release(self, tool: BaseTool, instance_id: str, **kwargs: Any) -> str | None:
        """``tool.release`` off the loop; never raises: returns None, or the error reason (also logged)."""
        try:
            await self._run(tool, lambda: tool.release(instance_id, **kwargs))
        except Exception as exc:
            reason = self._reason(tool, exc)
            logger.warning("tool %s: release(%s) failed: %s", tool.name, instance_id, reason)
            return reason
        return None

    def shutdown(self, wait: bool = False) -> None:
        """Stop the worker threads (``wait``: after the running calls finish)."""
        self._pool.shutdown(wait=wait, cancel_futures=True)
