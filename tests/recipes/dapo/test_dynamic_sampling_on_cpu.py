"""DAPO dynamic sampling on hand-made groups: which groups survive, accumulation, trimming, the budget error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridrl.protocol import DataProto
from hybridrl.recipes.dapo.dynamic_sampling import DynamicSampler, group_metric_values, kept_group_uids

R = 3  # response length


def scored_batch(groups: dict[str, list[float]], extra: str | None = "acc") -> DataProto:
    """One row per response: the score sits on the last token of ``token_level_scores`` ``[B, R]``."""
    uids = [uid for uid, scores in groups.items() for _ in scores]
    scores = [s for group in groups.values() for s in group]
    token_scores = torch.zeros(len(scores), R)
    token_scores[:, -1] = torch.tensor(scores)
    non_tensors = {"uid": np.array(uids, dtype=object)}
    if extra:
        non_tensors[extra] = np.array(scores, dtype=object)
    return DataProto.from_dict(
        tensors={"token_level_scores": token_scores, "row": torch.arange(len(scores))},
        non_tensors=non_tensors,
        meta_info={"global_token_num": list(range(len(scores))), "temperature": 1.0},
    )


def test_kept_group_uids_needs_variance_or_a_single_response():
    uids = np.array(["a", "a", "b", "b", "c", "d", "d"], dtype=object)
    values = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.5])
    # a: std([1, 0]) = 0.5 > 0 → kept;  b: std([1, 1]) = 0 → dropped;  c: one response → kept;  d: constant → dropped
    assert kept_group_uids(uids, values) == ["a", "c"]


def test_group_metric_values_reads_tensors_and_extras():
    batch = scored_batch({"a": [1.0, -1.0]})
    batch.non_tensor_batch["score"] = np.array([0.25, 0.75], dtype=object)
    assert group_metric_values(batch, "seq_reward").tolist() == [1.0, -1.0]
    # no token_level_rewards yet (KL-in-reward comes later) → seq_final_reward falls back to the scores
    assert group_metric_values(batch, "seq_final_reward").tolist() == [1.0, -1.0]
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"] * 2
    assert group_metric_values(batch, "seq_final_reward").tolist() == [2.0, -2.0]
    assert group_metric_values(batch, "score").tolist() == [0.25, 0.75]
    with pytest.raises(ValueError, match=r"algorithm.filter_groups.metric='pred'.*seq_reward"):
        group_metric_values(batch, "pred")


def test_sampler_accumulates_until_train_batch_size_then_trims_whole_groups():
    sampler = DynamicSampler(train_batch_size=3, metric="acc")
    # generation batch 1: only "a" varies → 1 prompt kept, need 3
    assert sampler.add(scored_batch({"a": [1, 0], "b": [0, 0], "c": [1, 1]})) is None
    assert sampler.num_gen_batches == 1 and sampler.kept_uids == ["a"]
    # generation batch 2: "d", "e", "f" vary → 4 prompts kept ≥ 3 → a step batch of the first 3 groups
    step = sampler.add(scored_batch({"d": [0, 1], "e": [1, 0], "f": [0, 1], "g": [0, 0]}))
    assert step is not None and step.num_gen_batches == 2
    assert step.batch.non_tensor_batch["uid"].tolist() == ["a", "a", "d", "d", "e", "e"]
    # rows of "a" were rows 0-1 of batch 1; "d", "e" rows 0-3 of batch 2
    assert step.batch.batch["row"].tolist() == [0, 1, 0, 1, 2, 3]
    # per-row meta_info lists are dropped (the trainer recomputes them); the rest is kept
    assert step.batch.meta_info == {"temperature": 1.0}
    assert sampler.num_gen_batches == 0 and sampler.kept_uids == [] and sampler.parts == []  # reset for the next step


def test_sampler_filters_on_seq_reward_without_extras():
    sampler = DynamicSampler(train_batch_size=1, metric="seq_reward")
    step = sampler.add(scored_batch({"a": [0.5, 0.5], "b": [0.0, 2.0]}, extra=None))
    assert step is not None and step.batch.non_tensor_batch["uid"].tolist() == ["b", "b"]


def test_sampler_raises_when_max_num_gen_batches_is_exhausted():
    sampler = DynamicSampler(train_batch_size=2, metric="acc", max_num_gen_batches=2)
    assert sampler.add(scored_batch({"a": [1, 1], "b": [1, 0]})) is None  # 1 kept after 1 batch: budget left
    with pytest.raises(ValueError, match=r"2 generation batches \(algorithm.filter_groups.max_num_gen_batches=2\)"
                       r" kept only 1 of data.train_batch_size=2") as error:
        sampler.add(scored_batch({"c": [0, 0], "d": [1, 1]}))
    assert "0 = no limit" in str(error.value)


def test_sampler_without_limit_keeps_generating():
    sampler = DynamicSampler(train_batch_size=1, metric="acc", max_num_gen_batches=0)
    for _ in range(20):  # all-constant groups forever: no error with max_num_gen_batches=0
        assert sampler.add(scored_batch({"a": [1, 1]})) is None
    assert sampler.num_gen_batches == 20
