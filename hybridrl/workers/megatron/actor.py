"""The PPO actor on a megatron-core model (verl's ``MegatronPPOActor`` API: ``compute_log_prob``, ``update_policy``).

It is :class:`hybridrl.workers.actor.DataParallelPPOActor` with Megatron's model and optimizer: the same
micro-batching, the same losses from :mod:`hybridrl.algos` and the same metrics. What differs:

- forward: :class:`hybridrl.workers.megatron.model.MegatronCausalLM` (logits gathered over TP; every TP rank
  computes the same loss and back-propagates into its own shard);
- zero_grad: megatron-core DDP's fp32 grad buffers and the optimizer's grads;
- optimizer step: ``finalize_model_grads`` (all-reduce over DP) then megatron-core's ``step()``, which clips to
  ``optim.clip_grad`` over all TP shards and returns the global grad norm (``actor/grad_norm``).

Gradients are averaged over DP ranks by megatron-core's DDP, as FSDP averages them, so the losses are normalised
as the FSDP actor's: by the mini-batch's global counts over megatron-core's data-parallel group (TP, PP and CP
ranks share their data and are counted once), times its size.

With PP > 1 the micro-batches of a log-prob pass or of a mini-batch go through megatron-core's pipeline schedule in
one call (:mod:`hybridrl.workers.megatron.pipeline`): the last stage computes the log-probs / the policy loss and
metrics, which are then broadcast over the pipeline group, so every rank returns what it returns at PP = 1.
"""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.algos.aggregation import LOCAL_BATCH, GlobalBatchInfo
from hybridrl.workers.actor.dp_actor import DataParallelPPOActor
from hybridrl.workers.megatron import pipeline
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

    def _token_outputs_of(self, micro_batches: list, temperature: float, calculate_entropy: bool,
                          calculate_sum_pi_squared: bool = False, topk: int = 0) -> dict[str, torch.Tensor]:
        """PP = 1: the actor's loop. PP > 1: one forward-only pipeline pass; the last stage's log-probs (and
        entropies, Σπ²) ``[B, R]`` broadcast over the pipeline group. ``topk`` (a distillation teacher's top-k)
        is the FSDP path's only: a Megatron run with teachers is refused at config time."""
        if pipeline.pipeline_size() == 1:
            return super()._token_outputs_of(micro_batches, temperature, calculate_entropy, calculate_sum_pi_squared,
                                             topk)
        if topk:
            raise NotImplementedError("top-k teacher log-probs need the FSDP actor (distillation with a Megatron "
                                      "actor is refused by the config check)")
        names = ["log_probs"] + ["entropys"] * calculate_entropy + ["sum_pi_squared"] * calculate_sum_pi_squared

        def last_stage(micro_batch: Any, _index: int) -> tuple[torch.Tensor, Any]:
            outputs = self._forward_token_outputs(micro_batch, temperature, calculate_entropy,
                                                  calculate_sum_pi_squared)
            return outputs["log_probs"].new_zeros(()), outputs

        payloads = pipeline.run_pipeline(self.actor_module, micro_batches, self.use_remove_padding, last_stage,
                                         forward_only=True)
        rows = sum(int(micro_batch["responses"].shape[0]) for micro_batch in micro_batches)
        responses = micro_batches[0]["responses"]
        shape, device = (rows, int(responses.shape[1])), responses.device
        return {
            name: pipeline.broadcast_from_last_stage(
                torch.cat([payload[name] for payload in payloads]) if payloads else None, shape, device)
            for name in names
        }

    def _dp_size(self) -> int:
        """megatron-core's data-parallel size (without CP: CP ranks hold the same rows)."""
        from megatron.core import parallel_state

        return int(parallel_state.get_data_parallel_world_size())

    def _accumulate_gradients(self, micro_batches: list, temperature: float, pg_loss_fn: Any,
                              skip_zero_adv: bool = False,
                              global_batch: GlobalBatchInfo = LOCAL_BATCH) -> list[dict[str, float]]:
        """PP = 1: the actor's loop (zero-advantage rows skipped as there). PP > 1: one forward-backward pipeline
        pass over the mini-batch, every row run; the last stage's per-micro-batch metrics broadcast over the
        pipeline group."""
        if pipeline.pipeline_size() == 1:
            return super()._accumulate_gradients(micro_batches, temperature, pg_loss_fn, skip_zero_adv, global_batch)

        def last_stage(micro_batch: Any, _index: int) -> tuple[torch.Tensor, Any]:
            return self._policy_loss(micro_batch, temperature, pg_loss_fn, global_batch)

        payloads = pipeline.run_pipeline(self.actor_module, micro_batches, self.use_remove_padding, last_stage,
                                         forward_only=False)
        return pipeline.broadcast_objects_from_last_stage(payloads or None)
