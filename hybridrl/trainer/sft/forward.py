"""The SFT forward: the summed next-token cross-entropy ``S_m`` of one micro batch (see ``loss.py``).

Two layouts give the same ``S_m`` (tests/trainer/sft/test_sft_remove_padding_on_cpu.py):

- padded (``use_remove_padding=False``): ``model(input_ids [B,T], attention_mask, position_ids)``;
- packed (``use_remove_padding=True``): the valid tokens of the micro batch in one ``[1, nnz]`` row with
  per-sequence position ids (:func:`hybridrl.utils.remove_padding.pack_sequences`), run by the PPO side's
  :func:`~hybridrl.workers.actor.forward.forward_packed_all_positions`. When the model is marked with a
  Ulysses group (``ulysses_sequence_parallel_size > 1``) each rank of the group runs a ``1/sp`` slice of
  that row and the per-token losses are all-gathered, so every rank of the group returns the same ``S_m``.

Notation: B micro-batch size, T ``data.max_length``, V vocabulary size, nnz valid tokens of the micro batch.
"""

from __future__ import annotations

import torch
from torch import nn

from hybridrl.trainer.sft.loss import masked_sum, masked_token_loss_sum, token_cross_entropy
from hybridrl.utils.remove_padding import pack_sequences
from hybridrl.workers.actor.forward import forward_packed_all_positions

__all__ = ["micro_batch_loss_sum"]


def micro_batch_loss_sum(
    module: nn.Module, micro: dict[str, torch.Tensor], use_remove_padding: bool, device: torch.device | str
) -> torch.Tensor:
    """``S_m``: the loss-masked sum of next-token cross-entropies of a micro batch (a scalar, differentiable).

    Args:
        module: the (FSDP-wrapped) causal LM; marked with an SP group for Ulysses.
        micro: ``input_ids, attention_mask, position_ids, loss_mask`` each ``[B, T]`` (right-padded SFT rows).
        use_remove_padding: run the packed, padding-free forward.
        device: where the model runs.
    """
    input_ids, attention_mask, position_ids, loss_mask = (
        micro[key].to(device) for key in ("input_ids", "attention_mask", "position_ids", "loss_mask")
    )
    if not use_remove_padding:
        logits = module(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).logits  # [B, T, V]
        return masked_token_loss_sum(logits, input_ids, loss_mask)
    _check_targets_are_attended(attention_mask, loss_mask)
    packed = pack_sequences(input_ids, attention_mask, position_ids)
    # position i of the packed row scores packed token i+1: the padded row's token t+1 wherever both are valid
    (token_loss,) = forward_packed_all_positions(module, packed, lambda logits, nxt: [token_cross_entropy(logits, nxt)])
    return masked_sum(packed.pad(token_loss), loss_mask)  # token_loss [1, nnz] → [B, T]


def _check_targets_are_attended(attention_mask: torch.Tensor, loss_mask: torch.Tensor) -> None:
    """The packed row only knows the next token inside a sequence: a target at position t needs tokens t and t+1.

    Raises:
        ValueError: a loss-mask position whose next token is padding (the padded forward would score the pad
            token; the packed one the next sequence's first token).
    """
    both_valid = attention_mask[:, :-1].bool() & attention_mask[:, 1:].bool()  # [B, T-1]
    stray = loss_mask[:, :-1].bool() & ~both_valid
    if bool(stray.any()):
        rows = sorted({int(r) for r in stray.nonzero()[:, 0]})
        raise ValueError(
            f"use_remove_padding=True: rows {rows} of the micro batch mark a loss at a position whose next token is "
            "padding (loss_mask[t]=1 needs attention_mask[t]=attention_mask[t+1]=1); zero those loss_mask entries in "
            "the dataset, or set use_remove_padding=False."
        )
