"""``agg_loss``: reduce a ``[B, T]`` per-token loss to a scalar (numerics of verl v0.5.0).

The same function aggregates the policy, entropy, KL and value losses, so one
``actor.loss_agg_mode`` changes all of them consistently.

Notation:
    B: sequences in the (micro-)batch, T: response length (``loss_mask.shape[-1]``).
    ℓ_{i,t}: per-token loss, m_{i,t}: loss mask, n_i = Σ_t m_{i,t}: valid tokens of sequence i.

Modes:
    token-mean:              Σ_{i,t} ℓ m / Σ_{i,t} m                 (every token weighs the same)
    seq-mean-token-sum:      (1/B) Σ_i Σ_t ℓ m                        (every sequence weighs the same)
    seq-mean-token-mean:     (1/B) Σ_i (Σ_t ℓ m / n_i)
    seq-mean-token-sum-norm: Σ_i Σ_t ℓ m / C, C = loss_scale_factor or T   (Dr.GRPO, arXiv 2503.20783)

Deviation notes (v0.5.0, kept on purpose for parity): the seq-mean modes average over *all* B rows,
including rows whose mask is empty (later verl skips them), and ``seq-mean-token-mean`` divides by
n_i with no epsilon, so a fully masked row makes the loss NaN, exactly as v0.5.0 does.
"""

from __future__ import annotations

import torch

from hybridrl.utils import torch_functional as verl_F

__all__ = ["LOSS_AGG_MODES", "agg_loss"]

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss matrix into a scalar.

    Args:
        loss_mat: ``[B, T]`` ℓ.
        loss_mask: ``[B, T]`` m.
        loss_agg_mode: one of ``LOSS_AGG_MODES``.
        loss_scale_factor: C for ``seq-mean-token-sum-norm``; ``None`` uses T = ``loss_mask.shape[-1]``.

    Returns:
        ``[]`` the aggregated loss.

    Raises:
        ValueError: for an unknown mode (names the valid ones).
    """
    if loss_agg_mode == "token-mean":
        return verl_F.masked_mean(loss_mat, loss_mask)
    # Σ_t ℓ_{i,t} m_{i,t}: per-sequence token sum, [B]
    seq_token_sum = torch.sum(loss_mat * loss_mask, dim=-1)
    if loss_agg_mode == "seq-mean-token-sum":
        return torch.mean(seq_token_sum)
    if loss_agg_mode == "seq-mean-token-mean":
        return torch.mean(seq_token_sum / torch.sum(loss_mask, dim=-1))
    if loss_agg_mode == "seq-mean-token-sum-norm":
        scale = loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor
        return torch.sum(seq_token_sum) / scale
    raise ValueError(
        f"Invalid loss_agg_mode: {loss_agg_mode!r}. Valid modes: {list(LOSS_AGG_MODES)} "
        "(set actor_rollout_ref.actor.loss_agg_mode / critic.loss_agg_mode)."
    )
