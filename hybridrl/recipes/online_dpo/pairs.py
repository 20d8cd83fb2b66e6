"""Preference pairs for online DPO: pick (chosen, rejected) per prompt and lay them out for the workers.

Layout contract of a *pair batch* (what ``update_actor_dpo`` and :func:`~hybridrl.algos.dpo_losses.split_pairs`
expect): pair ``k`` occupies rows ``2k`` (chosen) and ``2k+1`` (rejected). ``Dispatch.DP_COMPUTE_PROTO`` hands
each rank a contiguous, equal chunk, so a batch of ``P`` pairs with ``P % world_size == 0`` gives every rank
whole pairs. :func:`pad_pairs` repeats pairs with weight 0 (``dpo_pair_weight``) to reach that multiple.

    uid      [a  a  a  a  b  b  b  b]        scores [1  0  3  0  2  2  2  2]
    pairs    [(2, 1)]                        (prompt b: all tied → skipped; chosen = first max, rejected = first min)
    rows     [2, 1, 2, 1]  weights [1, 1, 0, 0]   (world_size = 2 → padded to 2 pairs)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from hybridrl.protocol import DataProto

__all__ = ["PAIR_BATCH_KEYS", "PAIR_WEIGHT_KEY", "build_pair_batch", "pad_pairs", "select_best_worst_pairs"]

PAIR_WEIGHT_KEY = "dpo_pair_weight"
# What the reference log-prob and the DPO update read from a pair batch.
PAIR_BATCH_KEYS = ["prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"]

Pair = tuple[int, int]  # (chosen row, rejected row)


def select_best_worst_pairs(uids: Sequence[object], scores: torch.Tensor) -> list[Pair]:
    """One pair per prompt: its best-scored response vs its worst; prompts whose responses all tie are skipped.

    Args:
        uids: ``[B]`` prompt id of every row (rows of a prompt need not be adjacent).
        scores: ``[B]`` sequence scores.

    Returns:
        ``[(chosen_row, rejected_row), ...]`` in the order prompts first appear; among equal scores the
        earliest row wins (chosen) or loses (rejected).
    """
    if len(uids) != scores.shape[0]:
        raise ValueError(f"select_best_worst_pairs: {len(uids)} uids for {scores.shape[0]} scores")
    rows_of: dict[object, list[int]] = {}
    for row, uid in enumerate(uids):
        rows_of.setdefault(uid, []).append(row)
    values = scores.tolist()
    pairs: list[Pair] = []
    for rows in rows_of.values():
        group = [values[row] for row in rows]
        best, worst = max(group), min(group)
        if best == worst:  # a tie (or a lone response) carries no preference
            continue
        pairs.append((rows[group.index(best)], rows[group.index(worst)]))
    return pairs


def pad_pairs(pairs: list[Pair], divisor: int) -> tuple[list[Pair], list[float]]:
    """Repeat pairs (cyclically) until their count is a multiple of ``divisor``; padding gets weight 0.

    Returns ``(pairs, weights)``; empty lists when there are no pairs.
    """
    if divisor < 1:
        raise ValueError(f"pad_pairs: divisor must be >= 1, got {divisor}")
    if not pairs:
        return [], []
    padding = -len(pairs) % divisor
    padded = pairs + [pairs[i % len(pairs)] for i in range(padding)]
    return padded, [1.0] * len(pairs) + [0.0] * padding


def build_pair_batch(batch: DataProto, pairs: list[Pair], world_size: int) -> DataProto | None:
    """The pair batch (rows chosen, rejected, chosen, …) of ``batch`` with ``dpo_pair_weight [2P]``.

    ``meta_info["dpo_num_pairs"]`` holds the number of real pairs (the loss denominator across ranks).
    Returns None when there are no pairs.
    """
    padded, weights = pad_pairs(pairs, world_size)
    if not padded:
        return None
    rows = [row for pair in padded for row in pair]
    pair_batch = batch.select(batch_keys=PAIR_BATCH_KEYS, non_tensor_batch_keys=[]).select_idxs(np.array(rows))
    row_weights = torch.tensor([w for w in weights for _ in range(2)], dtype=torch.float32)
    pair_batch.batch[PAIR_WEIGHT_KEY] = row_weights
    pair_batch.meta_info = {"dpo_num_pairs": len(pairs)}
    return pair_batch
