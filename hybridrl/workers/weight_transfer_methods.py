"""The weight-transfer RPC surface of the policy worker (a mixin of ``ActorRolloutRefWorker``).

    publish_weights(version)    actor ranks, ONE_TO_ALL: collective gather; rank 0 returns a WeightPackage
    receive_weights(package)    rollout-only ranks, ONE_TO_ALL, non-blocking: buckets → engine → verify
    rollout_policy_version()    rollout ranks, ONE_TO_ALL: the version the engine holds (0: model.path's weights)

The driver (``trainer.v1.trainer_mode=separate_async``)::

    package = first_package(actor_wg.publish_weights(version))
    refs = rollout_wg.receive_weights(package)     # queued before the next generate_sequences on each worker
    ...; del package                                # the buckets leave the object store once the receives finish

Ray runs a (non-asyncio) worker's calls in submission order, so a generate call submitted after the receive sees
the new weights. The mechanics live in ``hybridrl.workers.sharding_manager.weight_transfer``.
"""

from __future__ import annotations

from typing import Any

from hybridrl.single_controller.base.decorator import Dispatch, register
from hybridrl.workers.rollout.hf_rollout import resolve_dtype
from hybridrl.workers.sharding_manager.weight_sync import iter_full_state_dict
from hybridrl.workers.sharding_manager.weight_transfer import WeightPackage, publish_state_dict, receive_package

_MB = 1024 * 1024
# BaseRollout.sample_mode of engines that cannot read arbitrary indices (SGLang reads the first k values only);
# the actor packs its samples before any engine exists, so it looks the mode up by rollout.name.
_PREFIX_SAMPLE_ENGINES = ("sglang",)


class WeightTransferMethods:
    """Registered methods that move the actor's weights to rollout workers of another worker group.

    Expects the host worker's ``config`` (``actor_rollout_ref``), ``role``, ``rank``, ``_is_actor``,
    ``actor_module``, ``_actor_on_device`` and ``rollout`` (a ``RolloutHandle``).
    """

    config: Any
    role: str
    rank: int
    rollout: Any
    actor_module: Any
    _is_actor: bool

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def publish_weights(self, version: int) -> WeightPackage | None:
        """Put the actor's full weights (cast to ``rollout.dtype``) in Ray's object store, in buckets of
        ``rollout.update_weights_bucket_megabytes``. Collective over the actor ranks; rank 0 returns the package."""
        if not self._is_actor:
            raise RuntimeError(f"publish_weights needs an actor role; this worker has role={self.role!r}.")
        rollout_config = self.config.rollout
        sample_mode = "prefix" if rollout_config.name in _PREFIX_SAMPLE_ENGINES else "strided"
        with self._actor_on_device(with_optimizer=False):
            return publish_state_dict(
                iter_full_state_dict(self.actor_module),
                version=version,
                engine_dtype=resolve_dtype(rollout_config.dtype),
                bucket_bytes=int(rollout_config.update_weights_bucket_megabytes) * _MB,
                is_publisher=self.rank == 0,
                sample_mode=sample_mode,
            )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def receive_weights(self, package: WeightPackage) -> dict[str, float]:
        """Load ``package`` into this rollout-only worker's engine, verify it, record its version; returns
        ``rollout/weight_sync_s``, ``rollout/weight_sync_mb``, ``rollout/weight_transfer_s`` and more
        (``weight_transfer.receive_package``)."""
        handle = self._rollout_only_handle("receive_weights")
        handle.engine.wake()
        try:
            metrics = receive_package(
                handle.engine, package, engine_name=handle.engine_name, verify=handle.verify_weights
            )
        finally:
            handle.sleep()
        handle.policy_version = package.version
        return metrics

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rollout_policy_version(self) -> int:
        """The policy version the rollout engine holds: 0 for the weights of ``model.path`` loaded at start,
        else the ``version`` of the last package received."""
        if self.rollout is None:
            raise RuntimeError(f"rollout_policy_version needs a rollout role; this worker has role={self.role!r}.")
        return int(self.rollout.policy_version)

    def _rollout_hf_config(self) -> Any:
        """The HF config a rollout-only worker hands its engine (``model.path`` + ``model.override_config``)."""
        from hybridrl.workers.engine import load_hf_config

        model_config = self.config.model
        override = dict(model_config.override_config or {})
        override.pop("attn_implementation", None)  # a loading option, not a config field (as load_hf_model)
        return load_hf_config(
            model_config.path, override_config=override, trust_remote_code=bool(model_config.trust_remote_code)
        )

    def _rollout_only_handle(self, method: str) -> Any:
        if self.rollout is None or self.rollout.actor_module is not None:
            raise RuntimeError(
                f"{method} is for a rollout-only worker (role='rollout', on its own resource pool); this worker has "
                f"role={self.role!r}, whose engine {'follows its own actor' if self.rollout else 'does not exist'}."
            )
        return self.rollout
