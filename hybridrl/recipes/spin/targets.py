"""SPIN's pairs: the SFT target response (chosen) vs the model's own generation (rejected), per sample.

Each generated row keeps its prompt; its *target row* swaps the response for the tokenized SFT response
(``extra_info[response_key]``, else a ``response_key`` column), ending with EOS as a generation would,
truncated to the rollout's response length R and right-padded. Prompt tokens, prompt mask and position ids
are the generated row's (the rollout's response positions depend only on the prompt), so the two rows of
a pair differ only in the response.

    generated rows   g_0 … g_{B-1}        target rows   t_0 … t_{B-1}
    combined         [g_0 … g_{B-1}, t_0 … t_{B-1}]       pairs (B+i, i)   unless g_i's response == t_i's
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hybridrl.protocol import DataProto
from hybridrl.recipes.online_dpo.pairs import PAIR_BATCH_KEYS

__all__ = ["build_target_rows", "spin_pairs", "target_texts", "tokenize_targets"]


def target_texts(batch: DataProto, response_key: str) -> list[str]:
    """The SFT response of every row: ``extra_info[response_key]``, else the ``response_key`` column."""
    extra_infos = batch.non_tensor_batch.get("extra_info")
    column = batch.non_tensor_batch.get(response_key)
    texts = []
    for row in range(len(batch)):
        extra = extra_infos[row] if extra_infos is not None else None
        if isinstance(extra, dict) and extra.get(response_key) is not None:
            texts.append(str(extra[response_key]))
        elif column is not None and column[row] is not None:
            texts.append(str(column[row]))
        else:
            raise KeyError(
                f"SPIN needs the SFT response of every prompt: row {row} has neither extra_info[{response_key!r}] "
                f"nor a {response_key!r} column. Add it to data.train_files or point data.response_key at it."
            )
    return texts


def tokenize_targets(
    texts: Sequence[str], tokenizer: Any, response_length: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(ids [B, R], mask [B, R], num_truncated)``: each text's tokens + EOS, cut to R, padded with the pad id."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    if eos is None or pad is None:
        raise ValueError("SPIN targets need a tokenizer with eos_token_id and pad_token_id")
    ids = torch.full((len(texts), response_length), pad, dtype=torch.long)
    mask = torch.zeros((len(texts), response_length), dtype=torch.long)
    truncated = 0
    for row, text in enumerate(texts):
        tokens = [*tokenizer(text, add_special_tokens=False)["input_ids"], eos]
        truncated += len(tokens) > response_length
        tokens = tokens[:response_length]
        ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        mask[row, : len(tokens)] = 1
    return ids, mask, truncated


def build_target_rows(batch: DataProto, target_ids: torch.Tensor, target_mask: torch.Tensor) -> DataProto:
    """Rows with ``batch``'s prompts and the target responses (:data:`PAIR_BATCH_KEYS`, all ``[B, ·]``)."""
    prompts = batch.batch["prompts"]
    prompt_length = prompts.shape[-1]
    attention_mask = batch.batch["attention_mask"]
    target_mask = target_mask.to(attention_mask.dtype)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": target_ids,
            "input_ids": torch.cat([prompts, target_ids], dim=-1),
            "attention_mask": torch.cat([attention_mask[:, :prompt_length], target_mask], dim=-1),
            "position_ids": batch.batch["position_ids"],
            "response_mask": target_mask.to(batch.batch["response_mask"].dtype),
        }
    )


def spin_pairs(batch: DataProto, targets: DataProto) -> tuple[DataProto, list[tuple[int, int]]]:
    """``(combined, pairs)``: generated rows then target rows; pair ``(B + i, i)`` = (target, generation) for
    every row whose generated response differs from its target (an identical pair carries no gradient)."""
    generated = batch.select(batch_keys=PAIR_BATCH_KEYS, non_tensor_batch_keys=[], meta_info_keys=[])
    combined = DataProto.concat([generated, targets])
    gen_mask, target_mask = generated.batch["response_mask"].bool(), targets.batch["response_mask"].bool()
    same_mask = (gen_mask == target_mask).all(dim=-1)
    same_tokens = ((generated.batch["responses"] == targets.batch["responses"]) | ~gen_mask).all(dim=-1)
    identical = same_mask & same_tokens  # [B]
    size = len(batch)
    pairs = [(size + row, row) for row in range(size) if not bool(identical[row])]
    return combined, pairs
