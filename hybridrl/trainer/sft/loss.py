"""SFT loss: cross-entropy on response tokens, normalised by the target tokens of the GLOBAL batch.

Notation:
    B: micro-batch size, T: sequence length (``data.max_length``), V: vocabulary size,
    W: world size = dp · sp, dp: data-parallel size, sp: ``ulysses_sequence_parallel_size``,
    N: target tokens in the global batch (every dp rank, every micro batch, counted once).

A dp rank's micro batch m contributes ``S_m = Σ_t mask_t · CE(logits_t, input_ids_{t+1})``. The step loss is

    L = (1 / N) · Σ_{dp ranks} Σ_m S_m                                  (a token mean over the global batch)

Each rank back-propagates ``dp · S_m / N``. Without SP (dp = W) FSDP averages gradients over the W ranks,
so the update is exactly ∇L whatever the micro-batch split or the number of ranks (grad accumulation ≡ a
bigger batch). With Ulysses SP the sp ranks of a group all hold the same ``S_m`` (per-token losses are
all-gathered); the gather's backward hands each rank its slice's gradient times sp, so the group's ranks
sum to ``sp · ∇(dp · S_m / N)``; FSDP's average over all W = dp · sp ranks divides that by dp · sp,
leaving ``∇(S_m / N)`` per group: ∇L again (tests/trainer/sft/test_sft_sequence_parallel_on_cpu.py checks it).

Deviation from verl 0.5 (``FSDPSFTTrainer._compute_loss_and_backward``): verl normalises each micro
batch by its own token count and averages micro batches and ranks (a mean of means, which weights a
sample by 1/tokens-in-its-micro-batch); ``data.balance_dp_token=True`` only fixes the rank part.
hybridrl always uses the global token mean (what verl's later SFT engine does).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def masked_token_loss_sum(logits: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Sum of next-token cross-entropies where the loss mask is set.

    Args:
        logits: ``[B, T, V]`` model outputs; position t predicts token t + 1.
        input_ids: ``[B, T]``.
        loss_mask: ``[B, T]``, 1 at position t when token t + 1 is a target (SFTDataset's convention).

    Returns:
        A scalar: ``Σ_{b, t < T-1} loss_mask[b, t] · CE(logits[b, t], input_ids[b, t + 1])``.
    """
    token_loss = token_cross_entropy(logits[:, :-1, :], input_ids[:, 1:])  # [B, T-1]
    return (token_loss * loss_mask[:, :-1].to(token_loss.dtype)).sum()


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy in fp32: ``logits [N, T, V]``, ``labels [N, T]`` → ``[N, T]``."""
    flat = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
    return flat.view(labels.shape)


def masked_sum(token_loss: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """``Σ_{b, t < T-1} loss_mask[b, t] · token_loss[b, t]`` for ``[B, T]`` inputs (position t scores token t+1,
    so the last position predicts nothing)."""
    return (token_loss[:, :-1] * loss_mask[:, :-1].to(token_loss.dtype)).sum()


def num_target_tokens(loss_mask: torch.Tensor) -> torch.Tensor:
    """Target tokens counted by :func:`masked_token_loss_sum`: ``loss_mask[:, :-1].sum()`` (a scalar)."""
    return loss_mask[:, :-1].sum()
