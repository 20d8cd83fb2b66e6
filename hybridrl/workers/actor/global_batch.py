"""The mini-batch's global normalisers (verl 0.9's ``global_batch_info``) and how its loss metrics add up.

verl 0.9 normalises every micro-batch's loss by counts of the whole mini-batch over all data-parallel ranks
(``hybridrl.algos.aggregation``), so the micro-batch losses are partial sums of the mini-batch loss and the
gradient no longer depends on how the mini-batch was split. Per mini-batch, before its first micro-batch:

    N = Σ_{ranks} Σ_{rows, t} response_mask     (batch_num_tokens: one all-reduce, over every rank)
    G = Σ_{ranks} rows                           (global_batch_size)
    D = dp_size

Ranks that hold the same data (a Ulysses SP group, Megatron's TP / CP ranks) are counted once: the world sums
are divided by the number of such replicas (world / D). The loss metrics (``actor/pg_loss``, ``actor/entropy``,
``actor/kl_loss``, ``critic/vf_loss``) are then partial sums too: they are added over a mini-batch's
micro-batches (verl 0.9's ``AggregationType.SUM``) and reported once per mini-batch; the driver's mean over
ranks and mini-batches gives the mini-batch loss. Other metrics (clip fractions, KL) stay per micro-batch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from hybridrl.algos.aggregation import GlobalBatchInfo
from hybridrl.utils.device import current_device

__all__ = ["SUMMED_LOSS_METRICS", "merge_micro_batch_metrics", "mini_batch_info", "world_size"]

# metrics that are partial sums of the mini-batch loss once the loss is normalised globally
SUMMED_LOSS_METRICS = frozenset({"actor/pg_loss", "actor/entropy", "actor/kl_loss", "critic/vf_loss", "distillation/loss"})


def world_size() -> int:
    """Ranks in the default process group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def mini_batch_info(response_mask: torch.Tensor, dp_size: int, loss_scale_factor: float | None) -> GlobalBatchInfo:
    """N, G and D of a mini-batch (module docstring); every rank must call it for the same mini-batch.

    Args:
        response_mask: ``[B, R]`` this rank's mini-batch mask.
        dp_size: D (``world_size() // replicas``); the world must be a multiple of it.
        loss_scale_factor: C of ``seq-mean-token-sum-norm`` (``*.loss_scale_factor``), carried along.
    """
    world = world_size()
    if world % dp_size:
        raise ValueError(f"data-parallel size {dp_size} does not divide the world size {world}.")
    counts = torch.tensor([float(response_mask.sum()), float(response_mask.shape[0])], dtype=torch.float64)
    if world > 1:
        counts = counts.to(current_device())
        dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    replicas = world // dp_size
    tokens, rows = (int(round(value / replicas)) for value in counts.tolist())
    return GlobalBatchInfo(dp_size, tokens, rows, loss_scale_factor)


def merge_micro_batch_metrics(micro_metrics: list[dict[str, Any]], summed: bool) -> dict[str, list[float]]:
    """One mini-batch's metrics: each key's per-micro-batch values, a loss metric's added into one when ``summed``."""
    merged: dict[str, list[float]] = {}
    for metrics in micro_metrics:
        for key, value in metrics.items():
            merged.setdefault(key, []).append(float(value))
    if summed:
        for key in SUMMED_LOSS_METRICS & merged.keys():
            merged[key] = [sum(merged[key])]
    return merged
