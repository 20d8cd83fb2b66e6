"""The critic's clipped value loss (PPO2's value clipping; numerics of verl 0.9).

Paper → deviation: PPO (Schulman et al. 2017, arXiv 1707.06347) clips the *ratio*; the value clip is
OpenAI baselines' ``ppo2`` trick, not in the paper: the new prediction may move at most c away from
the value the rollout saw, and the worse of the clipped / unclipped squared errors is taken. The
aggregation is ``agg_loss``'s, normalised by the global mini-batch when ``global_batch`` says so.

Notation:
    B: batch size, T: response length; all tensors ``[B, T]``.
    V_pred (vpreds): the critic's new predictions, V_old (values): the predictions at rollout time,
    R (returns): the regression targets, m: response mask, c: ``critic.cliprange_value``.
"""

from __future__ import annotations

import torch

from hybridrl.algos.aggregation import LOCAL_BATCH, GlobalBatchInfo, agg_loss
from hybridrl.utils import torch_functional as verl_F

__all__ = ["clipped_value_loss"]


def clipped_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss.

    V_clip = clip(V_pred, V_old − c, V_old + c);  L = ½ · agg(max((V_pred − R)², (V_clip − R)²))

    Args:
        vpreds: ``[B, T]`` V_pred (carries the gradient).
        returns: ``[B, T]`` R.
        values: ``[B, T]`` V_old.
        response_mask: ``[B, T]`` m.
        cliprange_value: c.
        loss_agg_mode: see ``aggregation.agg_loss``.
        global_batch: the mini-batch's normalisers (``dp_size``, ``batch_num_tokens``, ``global_batch_size``,
            ``loss_scale_factor``); the default normalises by this micro-batch alone.

    Returns:
        loss ``[]``; metrics ``{"critic/vf_clipfrac": []}`` = mean_m[(V_clip − R)² > (V_pred − R)²], detached.
    """
    vpreds_clipped = verl_F.clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    loss_unclipped = (vpreds - returns) ** 2
    loss_clipped = (vpreds_clipped - returns) ** 2
    loss_mat = torch.max(loss_unclipped, loss_clipped)
    loss = 0.5 * agg_loss(loss_mat, response_mask, loss_agg_mode, **global_batch.as_kwargs())
    with torch.no_grad():
        clipfrac = verl_F.masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
    return loss, {"critic/vf_clipfrac": clipfrac}
