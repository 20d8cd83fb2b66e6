"""Pipeline parallelism (PP > 1) for the Megatron policy through megatron-core's schedules.

One call of ``get_forward_backward_func()`` (1F1B without interleaving) runs all micro-batches of a log-prob pass
(``forward_only=True``) or of a mini-batch (forward and backward). Every stage runs the actor's own forward code
(:func:`hybridrl.workers.actor.forward.forward_response` on the :class:`MegatronCausalLM` view):

- a stage other than the last returns its hidden state ``[S, B, H]`` (``MegatronCausalLM.stage_output``), which the
  schedule sends to the next stage; a stage other than the first gets its input from the schedule
  (``set_input_tensor``), so both see the same input layout (padded columns or packed row);
- the last stage computes the log-probs (entropies) or the actor's policy loss and metrics; the loss it returns is
  multiplied by the number of micro-batches, which the schedule divides again, so each micro-batch's loss (already
  normalised by the mini-batch's global counts) enters the gradient as at PP = 1.

Afterwards the last stage's results are broadcast over the pipeline group, so every rank returns what PP = 1
returns. Shapes: the TransformerConfig has ``variable_seq_lengths=True``, so the schedule sends each
micro-batch's shape before its tensor and micro-batches need no common shape (packed rows and trimmed padding
columns differ between micro-batches).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from hybridrl.workers.actor.forward import forward_response
from hybridrl.workers.megatron.model import MegatronCausalLM

__all__ = ["broadcast_from_last_stage", "broadcast_objects_from_last_stage", "pipeline_size", "run_pipeline"]

# last_stage_fn(micro_batch, index) -> (tensor the schedule treats as the output: a loss or anything, payload)
LastStageFn = Callable[[Any, int], tuple[torch.Tensor, Any]]


def pipeline_size() -> int:
    """megatron-core's pipeline-parallel world size (1 when its parallel state is not initialised)."""
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return 1
    return parallel_state.get_pipeline_model_parallel_world_size()


def run_pipeline(causal_lm: MegatronCausalLM, micro_batches: list, use_remove_padding: bool,
                 last_stage_fn: LastStageFn, forward_only: bool) -> list[Any]:
    """Run ``micro_batches`` through the pipeline; returns the last stage's payloads (empty on other stages).

    Args:
        causal_lm: this stage's model view (its ``module`` is the ``GPTModel`` or megatron-core DDP around it).
        micro_batches: TensorDicts with ``input_ids, attention_mask, position_ids [b, S]``, ``responses [b, R]``.
        use_remove_padding: the actor's input layout (packed row or padded columns), as in ``forward_response``.
        last_stage_fn: on the last stage, the micro-batch's output tensor and payload (it calls ``causal_lm``).
        forward_only: no backward (log-prob pass).
    """
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    is_last = parallel_state.is_pipeline_last_stage()
    payloads: list[Any] = []
    indexed = iter(enumerate(micro_batches))

    def forward_step(data_iterator: Any, _model: Any) -> tuple[torch.Tensor, Callable]:
        index, micro_batch = next(data_iterator)
        if is_last:
            output, payload = last_stage_fn(micro_batch, index)
            payloads.append(payload)
            return output * len(micro_batches), lambda tensor: (tensor, {})
        forward_response(causal_lm, micro_batch, use_remove_padding, lambda _logits, _tokens: [])
        hidden, causal_lm.stage_output = causal_lm.stage_output, None
        return hidden, lambda tensor: (tensor, {})

    first = micro_batches[0]
    get_forward_backward_func()(
        forward_step_func=forward_step, data_iterator=indexed, model=[causal_lm.module],
        num_microbatches=len(micro_batches), seq_length=first["input_ids"].shape[1],
        micro_batch_size=first["input_ids"].shape[0], forward_only=forward_only,
    )
    return payloads


def broadcast_from_last_stage(tensor: torch.Tensor | None, shape: tuple[int, ...], device: torch.device,
                              dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The last stage's ``tensor`` on every rank of the pipeline group (others pass None, its ``shape`` and the
    batch's ``device``: NCCL needs the receiving buffer on the GPU)."""
    from megatron.core import parallel_state

    if tensor is None:
        tensor = torch.empty(shape, dtype=dtype, device=device)
    tensor = tensor.contiguous()
    dist.broadcast(tensor, src=parallel_state.get_pipeline_model_parallel_last_rank(),
                   group=parallel_state.get_pipeline_model_parallel_group())
    return tensor


def broadcast_objects_from_last_stage(objects: list[Any] | None) -> list[Any]:
    """The last stage's list of picklable objects (e.g. metric dicts) on every rank of the pipeline group."""
    from megatron.core import parallel_state

    box = [objects]
    dist.broadcast_object_list(box, src=parallel_state.get_pipeline_model_parallel_last_rank(),
                               group=parallel_state.get_pipeline_model_parallel_group())
    return box[0]
