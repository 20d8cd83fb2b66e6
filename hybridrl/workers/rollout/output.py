"""Assemble verl's rollout output batch from prompts and generated token ids (shared by all engines).

Shapes (B rows, P prompt length, R = response length):

    prompts            [B, P]    left-padded prompt ids, as received
    responses          [B, R]    generated ids, right-padded with pad_token_id
    input_ids          [B, P+R]  cat(prompts, responses)
    attention_mask     [B, P+R]  cat(prompt mask, response mask); the response mask is 1 up to and
                                 including the first EOS (verl's get_response_mask)
    position_ids       [B, P+R]  prompt positions, then last prompt position + 1, + 2, ...
    rollout_log_probs  [B, R]    optional; -1 on padding (verl pads with -1), see generation/sampling.py
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hybridrl.utils.torch_functional import get_response_mask

ROLLOUT_LOG_PROB_PAD = -1.0  # verl 0.5's vLLM rollout pads rollout_log_probs with -1


def pad_responses(
    responses: Sequence[Sequence[int]] | torch.Tensor, response_length: int, pad_token_id: int
) -> torch.Tensor:
    """Right-pad (or truncate) ragged token lists / a ``[B, r]`` tensor to exactly ``[B, R]`` (int64)."""
    rows = responses.tolist() if isinstance(responses, torch.Tensor) else responses
    out = torch.full((len(rows), response_length), pad_token_id, dtype=torch.long)
    for i, row in enumerate(rows):
        row = list(row)[:response_length]
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def pad_log_probs(log_probs: Sequence[Sequence[float]] | torch.Tensor, response_length: int) -> torch.Tensor:
    """Right-pad per-row log-prob lists to ``[B, R]`` float32 with ``ROLLOUT_LOG_PROB_PAD``."""
    rows = log_probs.tolist() if isinstance(log_probs, torch.Tensor) else log_probs
    out = torch.full((len(rows), response_length), ROLLOUT_LOG_PROB_PAD, dtype=torch.float32)
    for i, row in enumerate(rows):
        row = list(row)[:response_length]
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return out


def build_rollout_tensors(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    responses: torch.Tensor,
    eos_token_ids: Sequence[int],
    rollout_log_probs: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """verl's rollout batch from the prompt tensors ``[B, P]`` and padded ``responses [B, R]``.

    Position ids continue from the last prompt position: ``pos[:, P + t] = pos[:, P - 1] + 1 + t``.
    For 3-D (mrope) position ids ``[B, C, P]`` the same delta is added on every channel.
    """
    if responses.shape[0] != input_ids.shape[0]:
        raise ValueError(f"responses has {responses.shape[0]} rows but prompts have {input_ids.shape[0]}")
    responses = responses.to(input_ids.device, dtype=input_ids.dtype)
    response_length = responses.shape[1]
    delta = torch.arange(1, response_length + 1, device=position_ids.device, dtype=position_ids.dtype)
    if position_ids.dim() == 3:
        response_position_ids = position_ids[..., -1:] + delta.view(1, 1, -1)
    else:
        response_position_ids = position_ids[:, -1:] + delta.view(1, -1)
    response_mask = get_response_mask(responses, list(eos_token_ids), dtype=attention_mask.dtype)
    tensors = {
        "prompts": input_ids,
        "responses": responses,
        "input_ids": torch.cat([input_ids, responses], dim=-1),
        "attention_mask": torch.cat([attention_mask, response_mask.to(attention_mask.device)], dim=-1),
        "position_ids": torch.cat([position_ids, response_position_ids], dim=-1),
    }
    if rollout_log_probs is not None:
        tensors["rollout_log_probs"] = rollout_log_probs.to(input_ids.device)
    return tensors
