"""``agg_loss``: reduce a ``[B, T]`` per-token loss to a scalar, normalised by the global batch (verl 0.9).

The same function aggregates the policy, entropy, KL and value losses, so one ``actor.loss_agg_mode``
changes all of them consistently.

Why global: a PPO mini-batch is split into micro-batches (and across data-parallel ranks) whose
gradients are summed. If each micro-batch divided by its *own* token or sequence count (verl 0.5),
the mini-batch gradient would depend on how the split fell whenever micro-batches hold different
token counts. verl 0.9 divides every micro-batch's sum by the mini-batch's count over all ranks
instead, so the micro-batch losses are partial sums of the one mini-batch loss; each rank multiplies
by ``dp_size`` because FSDP / DDP average gradients over the ranks.

Notation:
    B: sequences in the micro-batch, T: response length (``loss_mask.shape[-1]``).
    ℓ_{i,t}: per-token loss, m_{i,t}: loss mask, n_i = Σ_t m_{i,t}: valid tokens of sequence i.
    D: dp_size, N: batch_num_tokens (valid tokens of the mini-batch on all ranks),
    G: global_batch_size (sequences of the mini-batch on all ranks), C: loss_scale_factor.
    s_i = [n_i > 0]: the sequence has a valid token (fully masked rows are left out).

Modes (given N / G; without them, N and G are this micro-batch's own Σm and Σ_i s_i and D must be 1):
    token-mean:              D · Σ_{i,t} ℓ m / N
    token-sum:               D · Σ_{i,t} ℓ m                        (no normalisation)
    seq-mean-token-sum:      D · Σ_i s_i Σ_t ℓ m / G
    seq-mean-token-mean:     D · Σ_i s_i (Σ_t ℓ m / (n_i + 1e-8)) / G
    seq-mean-token-sum-norm: D · Σ_i s_i Σ_t ℓ m / G / C,  C = loss_scale_factor or T   (Dr.GRPO, arXiv 2503.20783)

Deviation from verl 0.5 (the numerics before): 0.5 divided by the micro-batch's own counts, averaged
the seq-mean modes over all B rows (empty ones too; ``seq-mean-token-mean`` was NaN for an empty row),
and its ``seq-mean-token-sum-norm`` was Σ/T, a factor B larger than 0.9's Σ/(G·T). As in verl 0.9, a
micro-batch without any valid token gives 0/0 = NaN in local mode (token-mean, seq-mean-*).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from hybridrl.utils import torch_functional as verl_F

__all__ = ["LOSS_AGG_MODES", "GlobalBatchInfo", "agg_loss"]

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
# seq-mean-token-mean divides a row's token sum by n_i + this, so a fully masked row gives 0, not NaN (verl 0.9)
SEQ_TOKEN_MEAN_EPS = 1e-8

Count = int | float | torch.Tensor


@dataclass(frozen=True)
class GlobalBatchInfo:
    """The normalisers of one mini-batch (verl 0.9's ``ActorConfig.global_batch_info``); None: this micro-batch's own.

    ``dp_size`` D, ``batch_num_tokens`` N, ``global_batch_size`` G, ``loss_scale_factor`` C (see the module notation).
    """

    dp_size: int = 1
    batch_num_tokens: Count | None = None
    global_batch_size: Count | None = None
    loss_scale_factor: float | None = None

    def as_kwargs(self) -> dict[str, Any]:
        """The four keyword arguments of :func:`agg_loss` (verl's ``**config.global_batch_info``)."""
        return asdict(self)

    @property
    def is_global(self) -> bool:
        """Whether a loss normalised with it is a partial sum of the mini-batch loss (verl: metrics then SUM)."""
        return (
            self.dp_size > 1
            or self.batch_num_tokens is not None
            or self.global_batch_size is not None
            or self.loss_scale_factor is not None
        )


LOCAL_BATCH = GlobalBatchInfo()


def _require_global(value: Count | None, name: str, dp_size: int) -> None:
    if value is None and dp_size > 1:
        raise ValueError(
            f"agg_loss: {name} is required when dp_size > 1 (the count over every data-parallel rank); "
            f"pass {name}=... or dp_size=1."
        )


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: Count | None = None,
    global_batch_size: Count | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss matrix into a scalar (see the module docstring for each mode).

    Args:
        loss_mat: ``[B, T]`` ℓ.
        loss_mask: ``[B, T]`` m (bool or 0/1).
        loss_agg_mode: one of ``LOSS_AGG_MODES``.
        dp_size: D, the data-parallel ranks whose gradients are averaged.
        batch_num_tokens: N for ``token-mean``; None: this micro-batch's Σm (needs D = 1).
        global_batch_size: G for the ``seq-mean-*`` modes; None: this micro-batch's non-empty rows (needs D = 1).
        loss_scale_factor: C for ``seq-mean-token-sum-norm``; None: T = ``loss_mask.shape[-1]``.

    Returns:
        ``[]`` the aggregated loss (with N / G given: this micro-batch's share of the mini-batch loss, times D).

    Raises:
        ValueError: an unknown mode (names the valid ones), or D > 1 without the global count the mode needs.
    """
    if loss_agg_mode == "token-mean":
        _require_global(batch_num_tokens, "batch_num_tokens", dp_size)
        tokens = loss_mask.sum() if batch_num_tokens is None else batch_num_tokens
        return verl_F.masked_sum(loss_mat, loss_mask) / tokens * dp_size
    if loss_agg_mode == "token-sum":
        # DDP / FSDP average over ranks: × D makes the reduced gradient the sum over all valid tokens
        return verl_F.masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(
            f"Invalid loss_agg_mode: {loss_agg_mode!r}. Valid modes: {list(LOSS_AGG_MODES)} "
            "(set actor_rollout_ref.actor.loss_agg_mode / critic.loss_agg_mode)."
        )
    _require_global(global_batch_size, "global_batch_size", dp_size)
    row_tokens = torch.sum(loss_mask, dim=-1)  # n_i, [B]
    row_sums = torch.sum(loss_mat * loss_mask, dim=-1)  # Σ_t ℓ m, [B]
    if loss_agg_mode == "seq-mean-token-mean":
        row_sums = row_sums / (row_tokens + SEQ_TOKEN_MEAN_EPS)
    has_tokens = (row_tokens > 0).float()  # s_i: fully masked rows are left out
    rows = has_tokens.sum() if global_batch_size is None else global_batch_size
    loss = verl_F.masked_sum(row_sums, has_tokens) / rows * dp_size
    if loss_agg_mode == "seq-mean-token-sum-norm":
        loss = loss / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return loss
