"""Online-DPO pair selection and layout, SPIN target rows and pairs (pure, no Ray)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridrl.algos.dpo_losses import split_pairs
from hybridrl.protocol import DataProto
from hybridrl.recipes.online_dpo.pairs import (
    PAIR_WEIGHT_KEY,
    build_pair_batch,
    pad_pairs,
    select_best_worst_pairs,
)
from hybridrl.recipes.spin.targets import build_target_rows, spin_pairs, target_texts, tokenize_targets

# ---------------------------------------------------------------------------- online DPO pairs


def test_best_vs_worst_per_prompt_ties_skipped():
    # prompt a: rows 0,2,4 scores 0.5, 0.9, 0.1 → chosen row 2, rejected row 4
    # prompt b: rows 1,3 both 1.0 → tie, skipped;  prompt c: row 5 alone → skipped
    # prompt d: rows 6,7 scores 0, 1 → (7, 6)
    uids = ["a", "b", "a", "b", "a", "c", "d", "d"]
    scores = torch.tensor([0.5, 1.0, 0.9, 1.0, 0.1, 3.0, 0.0, 1.0])
    assert select_best_worst_pairs(uids, scores) == [(2, 4), (7, 6)]


def test_equal_scores_pick_the_earliest_rows():
    # scores [1, 1, 0, 0]: chosen = first max (row 0), rejected = first min (row 2)
    assert select_best_worst_pairs(["u"] * 4, torch.tensor([1.0, 1.0, 0.0, 0.0])) == [(0, 2)]


def test_select_rejects_length_mismatch():
    with pytest.raises(ValueError, match="3 uids for 2 scores"):
        select_best_worst_pairs(["a", "b", "c"], torch.zeros(2))


def test_pad_pairs_to_world_size():
    # 3 pairs, world size 2 → 4 pairs, the 4th repeats the 1st with weight 0
    pairs, weights = pad_pairs([(0, 1), (2, 3), (4, 5)], 2)
    assert pairs == [(0, 1), (2, 3), (4, 5), (0, 1)] and weights == [1.0, 1.0, 1.0, 0.0]
    assert pad_pairs([(0, 1), (2, 3)], 2) == ([(0, 1), (2, 3)], [1.0, 1.0])
    assert pad_pairs([], 4) == ([], [])


def _rollout_batch(num_rows: int, prompt_length: int = 3, response_length: int = 4) -> DataProto:
    """A fake rollout batch whose row i holds the value i in every token (so rows can be traced)."""
    rows = torch.arange(num_rows).unsqueeze(-1)
    response_mask = torch.ones(num_rows, response_length, dtype=torch.long)
    return DataProto.from_dict(
        tensors={
            "prompts": rows.expand(num_rows, prompt_length).clone(),
            "responses": rows.expand(num_rows, response_length).clone(),
            "input_ids": rows.expand(num_rows, prompt_length + response_length).clone(),
            "attention_mask": torch.ones(num_rows, prompt_length + response_length, dtype=torch.long),
            "position_ids": torch.arange(prompt_length + response_length).expand(num_rows, -1).clone(),
            "response_mask": response_mask,
            "token_level_scores": torch.zeros(num_rows, response_length),
        },
        non_tensors={"uid": np.array([f"u{i // 2}" for i in range(num_rows)], dtype=object)},
    )


def test_pair_batch_layout_keeps_pairs_on_one_rank():
    batch = _rollout_batch(8)
    pairs = [(1, 0), (2, 3), (5, 4)]  # 3 pairs over 2 ranks → padded to 4
    pair_batch = build_pair_batch(batch, pairs, world_size=2)
    assert pair_batch.batch["input_ids"][:, 0].tolist() == [1, 0, 2, 3, 5, 4, 1, 0]
    assert pair_batch.batch[PAIR_WEIGHT_KEY].tolist() == [1, 1, 1, 1, 1, 1, 0, 0]
    assert pair_batch.meta_info == {"dpo_num_pairs": 3}
    assert "token_level_scores" not in pair_batch.batch.keys() and pair_batch.non_tensor_batch == {}
    # dispatch chunks contiguously: each rank gets 2 whole pairs, chosen on even rows
    for chunk in pair_batch.chunk(2):
        chosen, rejected = split_pairs(chunk.batch["input_ids"][:, 0])
        assert len(chunk) == 4 and all((c, r) in pairs for c, r in zip(chosen.tolist(), rejected.tolist()))
    assert build_pair_batch(batch, [], world_size=2) is None


# ---------------------------------------------------------------------------- SPIN


class _CharTokenizer:
    """One token per character (ord), EOS 1, pad 0."""

    eos_token_id, pad_token_id = 1, 0

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [ord(ch) for ch in text]}


def test_target_texts_from_extra_info_then_column():
    batch = _rollout_batch(2)
    batch.non_tensor_batch["extra_info"] = np.array([{"response": "7"}, {"index": 1}], dtype=object)
    batch.non_tensor_batch["response"] = np.array(["x", "8"], dtype=object)
    assert target_texts(batch, "response") == ["7", "8"]
    del batch.non_tensor_batch["response"]
    with pytest.raises(KeyError, match=r"row 1 has neither extra_info\['response'\]"):
        target_texts(batch, "response")


def test_tokenize_targets_appends_eos_truncates_and_pads():
    # "ab" → [97, 98, EOS=1, pad 0]; "abcde" → 6 tokens cut to 4, counted as truncated
    ids, mask, truncated = tokenize_targets(["ab", "abcde"], _CharTokenizer(), response_length=4)
    assert ids.tolist() == [[97, 98, 1, 0], [97, 98, 99, 100]]
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert truncated == 1


def test_target_rows_and_spin_pairs():
    batch = _rollout_batch(2, prompt_length=3, response_length=4)
    batch.batch["attention_mask"][0, 0] = 0  # row 0's prompt is left-padded by one token
    # row 0's target differs from its generation; row 1's target equals its generation [1, 1, 1, 1]
    target_ids = torch.tensor([[9, 9, 0, 0], [1, 1, 1, 1]])
    target_mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    targets = build_target_rows(batch, target_ids, target_mask)
    assert targets.batch["input_ids"][0].tolist() == [0, 0, 0, 9, 9, 0, 0]
    assert targets.batch["attention_mask"][0].tolist() == [0, 1, 1, 1, 1, 0, 0]  # prompt mask kept
    assert torch.equal(targets.batch["position_ids"], batch.batch["position_ids"])
    combined, pairs = spin_pairs(batch, targets)
    assert pairs == [(2, 0)]  # (target row 0, generation row 0); row 1 is identical and skipped
    assert combined.batch["responses"][2].tolist() == [9, 9, 0, 0]
