"""``AsyncActorRolloutRefWorker``: the policy worker of ``rollout.mode=async`` (verl's class of that name).

It is an ``ActorRolloutRefWorker`` whose rollout engine also serves token-in/token-out requests. Its three
server methods are ``Dispatch.DIRECT_ROLLOUT_METHOD``: the ``AgentLoopManager`` calls them on each rank's Ray
handle, not through the worker group::

    wake_up()                                    engine wakes, takes the actor's weights when stale (collective:
                                                 every rank at once), the async server starts
    generate(request_id, prompt_ids, sampling_params) -> TokenOutput     many at once (asyncio actor)
    sleep()                                      the server finishes in-flight requests and stops, engine sleeps

Because these methods are coroutines the Ray actor is an asyncio actor: the training methods (``update_actor``,
...) still run one at a time on its event loop, and requests are only served between ``wake_up`` and ``sleep``.
"""

from __future__ import annotations

from typing import Any

from hybridrl.single_controller.base.decorator import Dispatch, register
from hybridrl.workers.actor_rollout_ref_worker import ActorRolloutRefWorker

__all__ = ["AsyncActorRolloutRefWorker"]


class AsyncActorRolloutRefWorker(ActorRolloutRefWorker):
    """Policy worker with a rollout server (see the module docstring)."""

    _server: Any = None

    def _require_rollout(self, method: str) -> None:
        if not self._is_rollout:
            raise RuntimeError(f"{method} needs a rollout role; this worker has role={self.role!r}.")

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def wake_up(self) -> dict[str, float]:
        """Wake the engine, sync the actor's weights when stale (verified), start serving; returns sync metrics."""
        self._require_rollout("wake_up")
        with self._actor_on_device(with_optimizer=False):
            metrics = self.rollout.wake_up()
        if self._server is None:
            from hybridrl.workers.rollout.async_server import build_async_server

            self._server = build_async_server(self.rollout.engine, self.config.rollout)
        self._server.start()
        return metrics

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def sleep(self) -> None:
        """Finish the requests in flight, stop serving and let the engine free its memory."""
        self._require_rollout("sleep")
        if self._server is not None:
            self._server.stop()
        self.rollout.sleep()

    @register(dispatch_mode=Dispatch.DIRECT_ROLLOUT_METHOD)
    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]) -> Any:
        """``TokenOutput`` (token ids, log-probs, stop reason) for one request; only between wake_up and sleep."""
        if self._server is None:
            raise RuntimeError("generate was called before wake_up: the rollout server is not running")
        return await self._server.generate(request_id, prompt_ids, sampling_params)
