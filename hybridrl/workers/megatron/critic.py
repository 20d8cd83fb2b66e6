"""The PPO critic on a megatron-core value model (verl's ``MegatronPPOCritic`` API: ``compute_values``,
``update_critic``).

It is :class:`hybridrl.workers.critic.DataParallelPPOCritic` with Megatron's model and optimizer: the same
micro-batching, the same clipped value loss (:func:`hybridrl.algos.value_loss.clipped_value_loss`) and the same
metrics (``critic/vf_loss``, ``critic/vf_clipfrac``, ``critic/vpred_mean``, ``critic/grad_norm``). What differs:

- forward: :class:`hybridrl.workers.megatron.model.MegatronValueModel`, ``[B, S, 1]`` values from a ``GPTModel``
  whose output layer is a TP-replicated scalar head (every TP rank computes the same loss and back-propagates into
  its own shards);
- zero_grad and step: :class:`hybridrl.workers.megatron.actor.MegatronOptimizerHandle` (megatron-core DDP's grad
  buffers, ``finalize_model_grads``, megatron-core's ``step()`` clipping to ``critic.optim.clip_grad``, where the
  FSDP critic reads ``critic.grad_clip``).

A step megatron-core did not apply, or whose grad norm is not finite, counts as skipped for ``critic/skipped_steps``
and the divergence guard, as the FSDP critic's.
"""

from __future__ import annotations

from typing import Any

from hybridrl.workers.critic.dp_critic import DataParallelPPOCritic
from hybridrl.workers.megatron.actor import MegatronOptimizerHandle
from hybridrl.workers.megatron.engine import MegatronModel

__all__ = ["MegatronPPOCritic"]


class MegatronPPOCritic(DataParallelPPOCritic):
    """PPO critic over a value :class:`MegatronModel` (built with ``value_head``).

    Args:
        config: the ``critic`` section.
        model: this rank's value model (trainable).
        optimizer: a :class:`MegatronOptimizerHandle` over ``model``.
        **kwargs: :class:`DataParallelPPOCritic`'s keyword arguments (``use_remove_padding``, ``update``, ``values``).
    """

    def __init__(self, config: Any, model: MegatronModel, optimizer: MegatronOptimizerHandle, **kwargs: Any) -> None:
        super().__init__(config, model.causal_lm, optimizer, **kwargs)  # type: ignore[arg-type]
        self.megatron_model = model

    def _dp_size(self) -> int:
        """megatron-core's data-parallel size (without CP: TP / PP / CP ranks hold the same rows)."""
        from megatron.core import parallel_state

        return int(parallel_state.get_data_parallel_world_size())

    def _optimizer_step(self) -> float:
        """megatron-core's step (clip to ``optim.clip_grad`` inside); returns the grad norm, NaN when not applied."""
        assert isinstance(self.critic_optimizer, MegatronOptimizerHandle)
        stepped, grad_norm = self.critic_optimizer.step()
        self.divergence_guard.record(grad_norm if stepped else float("nan"))
        return grad_norm
