"""Rollout routing record (R3) of the hf engines: which experts the rollout weights route every token to.

After a batch is generated, one prefill forward of the engine's model over the finished sequences records each
router's top-k choice at every position: ``routed_experts [B, S, L, k]``, aligned with ``input_ids [B, S]``
(verl 0.9's batch key). The decode loop computed the same routing token by token with the same weights (a KV
cache changes the order of float sums, not the model), so the record is the rollout's routing; recording it in
the decode loop itself would save this forward but not change the record. The actor replays it with
``actor.router_replay.mode=R3`` (:mod:`hybridrl.workers.actor.moe`).

Notation: B rows, S = P + R tokens per row, L MoE layers, k experts per token.
"""

from __future__ import annotations

import torch
from torch import nn

from hybridrl.models.transformers.moe_router import ROUTED_EXPERTS_KEY, capture_routing

__all__ = ["ROUTED_EXPERTS_KEY", "record_routed_experts"]


@torch.no_grad()
def record_routed_experts(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    micro_batch_size: int | None = None,
) -> torch.Tensor:
    """The experts ``model`` routes every token of ``input_ids [B, S]`` to: ``[B, S, L, k]`` int16.

    ``micro_batch_size`` rows per forward (all at once when None); int16 holds expert ids below 32768 in a quarter
    of int64's memory (a [B, S, L, k] record grows with layers times top-k).
    """
    size = micro_batch_size or input_ids.shape[0]
    records = []
    for start in range(0, input_ids.shape[0], size):
        rows = slice(start, start + size)
        with capture_routing(model) as capture:
            model(
                input_ids=input_ids[rows],
                attention_mask=attention_mask[rows],
                position_ids=position_ids[rows],
                use_cache=False,
            )
        per_layer = torch.stack(capture.expert_ids[0], dim=1)  # [b*S, L, k]
        records.append(per_layer.reshape(*input_ids[rows].shape, *per_layer.shape[1:]).to(torch.int16))
    return torch.cat(records)
