"""The PPO actor on a megatron-core model (verl's ``MegatronPPOActor`` API: ``compute_log_prob``, ``update_policy``).

It is :class:`hybridrl.workers.actor.DataParallelPPOActor` with Megatron's model and optimizer: the same
micro-batching, the same losses from :mod:`hybridrl.algos` and the same metrics. What differs:

- forward: :class:`hybridrl.workers.megatron.model.MegatronCausalLM` (logits gathered over TP; every TP rank
  computes the same loss and back-propagates into its own shard);
- zero_grad: megatron-core DDP's fp32 grad buffers and the optimizer's grads;
- optimizer step: ``finalize_model_grads`` (all-reduce over DP) then megatron-core's ``step()``, which clips to
  ``optim.clip_grad`` over all TP shards and returns the global grad norm (``actor/grad_norm``).

Gradients are averaged over DP ranks by megatron-core's DDP, as FSDP averages them, so the loss scale of a
micro-batch is the FSDP actor's.
"""

from __future__ import annotations

from typing import Any

from hybridrl.workers.actor.dp_actor import DataParallelPPOActor
from hybridrl.workers.megatron.engine import MegatronModel

__all__ = ["MegatronOptimizerHandle", "MegatronPPOActor"]


class MegatronOptimizerHandle:
    """What the actor's update loop calls on its "optimizer": ``zero_grad()`` and :meth:`step`.

    Args:
        optimizer: megatron-core's optimizer over ``model.ddp``.
        model: the trainable :class:`MegatronModel` (its DDP holds the grad buffers).
    """

    def __init__(self, optimizer: Any, model: MegatronModel) -> None:
        self.optimizer = optimizer
        self.model = model

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model.ddp.zero_grad_buffer()
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> tuple[bool, float]:
        """All-reduce grads over DP, clip and step; returns ``(stepped, grad_norm)``."""
        from megatron.core.distributed import finalize_model_grads

        finalize_model_grads([self.model.ddp])
        stepped, grad_norm, _num_zeros = self.optimizer.step()
        return bool(stepped), float(grad_norm) if grad_norm is not None else float("nan")


class MegatronPPOActor(DataParallelPPOActor):
    """PPO actor (or, without an optimizer, a reference policy) over a :class:`MegatronModel`.

    Args:
        config: the ``actor_rollout_ref.actor`` (or ``.ref``) section.
        model: this rank's model.
        optimizer: a :class:`MegatronOptimizerHandle`; None for a reference policy.
        **kwargs: :class:`DataParallelPPOActor`'s keyword arguments (``update``, ``log_prob``, ``temperature``).
    """

    def __init__(self, config: Any, model: MegatronModel, optimizer: MegatronOptimizerHandle | None = None,
                 **kwargs: Any) -> None:
        super().__init__(config, model.causal_lm, optimizer, **kwargs)
        self.megatron_model = model

    def _optimizer_step(self) -> float:
        """megatron-core's step (clip to ``optim.clip_grad`` inside); returns the grad norm."""
        assert isinstance(self.actor_optimizer, MegatronOptimizerHandle)
        _stepped, grad_norm = self.actor_optimizer.step()
        return grad_norm
