"""verl 0.5's metric_utils contract: the step metrics read lengths through the module-level
``_compute_response_info`` (so patching it works), they accept any object with ``.batch`` /
``.meta_info`` (verl's tests pass a MagicMock), and the validation helpers keep verl's signatures.
"""

from __future__ import annotations

from unittest.mock import MagicMock, patch

import numpy as np
import pytest
import torch

from hybridrl.trainer.ppo import metric_utils
from hybridrl.trainer.ppo.metric_utils import (
    bootstrap_metric,
    calc_maj_val,
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    process_validation_metrics,
)
from hybridrl.utils.metric import reduce_metrics

PATCH_TARGET = "hybridrl.trainer.ppo.metric_utils._compute_response_info"


def mock_batch(**tensors) -> MagicMock:
    batch = MagicMock()
    batch.batch = tensors
    return batch


def full_batch() -> MagicMock:
    """B = 2, P = 2, R = 2, every token valid."""
    return mock_batch(
        token_level_scores=torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
        token_level_rewards=torch.tensor([[0.5, 1.0], [1.5, 2.0]]),
        advantages=torch.tensor([[0.1, 0.2], [0.3, 0.4]]),
        returns=torch.tensor([[1.1, 1.2], [1.3, 1.4]]),
        responses=torch.zeros(2, 2),
        attention_mask=torch.ones(2, 4, dtype=torch.long),
        response_mask=torch.ones(2, 2, dtype=torch.long),
        values=torch.tensor([[0.9, 1.0], [1.1, 1.2]]),
    )


def test_compute_response_info_returns_masks_and_lengths():
    # P = 3, R = 2; row 0: prompt 3 + response 2, row 1: prompt 1 + response 1
    batch = mock_batch(responses=torch.zeros(2, 2), attention_mask=torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 0]]))
    info = metric_utils._compute_response_info(batch)
    assert info["prompt_length"].tolist() == [3.0, 1.0] and info["response_length"].tolist() == [2.0, 1.0]
    assert info["response_mask"].tolist() == [[1, 1], [1, 0]]


def test_data_metrics_on_a_mock_batch_with_and_without_critic():
    with_critic = compute_data_metrics(full_batch(), use_critic=True)
    # score sums [3, 7] → mean 5; reward sums [1.5, 3.5] → mean 2.5
    assert with_critic["critic/score/mean"] == pytest.approx(5.0)
    assert with_critic["critic/rewards/mean"] == pytest.approx(2.5)
    assert {"critic/values/mean", "critic/vf_explained_var", "response_length/mean", "prompt_length/mean"} <= set(
        with_critic
    )
    without = compute_data_metrics(full_batch(), use_critic=False)
    assert "critic/values/mean" not in without and "critic/vf_explained_var" not in without
    assert {"critic/score/mean", "critic/rewards/mean", "response_length/mean"} <= set(without)


def test_patching_compute_response_info_drives_the_timing_metrics():
    batch = mock_batch(responses=torch.zeros(2, 3), attention_mask=torch.ones(2, 6))
    fake = {"prompt_length": torch.tensor([3.0, 3.0]), "response_length": torch.tensor([3.0, 3.0])}
    with patch(PATCH_TARGET, return_value=fake) as patched:
        metrics = compute_timing_metrics(batch, {"gen": 0.5, "ref": 0.3, "values": 0.2})
    patched.assert_called_once_with(batch)
    assert (metrics["timing_s/gen"], metrics["timing_s/ref"], metrics["timing_s/values"]) == (0.5, 0.3, 0.2)
    # gen: 6 response tokens → 500 ms / 6; ref and values: 12 tokens in all
    assert metrics["timing_per_token_ms/gen"] == pytest.approx(500 / 6)
    assert metrics["timing_per_token_ms/ref"] == pytest.approx(300 / 12)
    assert metrics["timing_per_token_ms/values"] == pytest.approx(200 / 12)


def test_patching_compute_response_info_drives_the_length_metrics():
    # the patched lengths (not the attention mask, which says 2 and 2) are what the metrics report
    fake = {"prompt_length": torch.tensor([1.0, 2.0]), "response_length": torch.tensor([2.0, 0.0])}
    with patch(PATCH_TARGET, return_value=fake):
        metrics = compute_data_metrics(full_batch(), use_critic=False)
    assert metrics["prompt_length/mean"] == 1.5 and metrics["prompt_length/clip_ratio"] == 0.5  # P = 2
    assert metrics["response_length/max"] == 2.0 and metrics["response_length/clip_ratio"] == 0.5  # R = 2


def test_throughput_metrics_on_a_mock_batch():
    batch = MagicMock()
    batch.meta_info = {"global_token_num": [100, 200, 300]}
    one = compute_throughout_metrics(batch, {"step": 2.0}, n_gpus=1)
    assert one == {"perf/total_num_tokens": 600, "perf/time_per_step": 2.0, "perf/throughput": 300.0}
    assert compute_throughout_metrics(batch, {"step": 2.0}, n_gpus=2)["perf/throughput"] == 150.0  # 600 / (2 · 2)


def test_reduce_metrics_means_and_empty_lists():
    assert reduce_metrics({"loss": [1.0, 2.0, 3.0], "accuracy": [0.0, 0.5, 1.0]}) == {"loss": 2.0, "accuracy": 0.5}
    assert reduce_metrics({"single": [5.0]})["single"] == 5.0
    assert np.isnan(reduce_metrics({"empty": []})["empty"])


def test_bootstrap_metric_shapes_ranges_and_empty_data():
    mean_result, max_result = bootstrap_metric(
        [1, 2, 3, 4, 5], subset_size=3, reduce_fns=[np.mean, np.max], n_bootstrap=100
    )
    assert len(mean_result) == 2 and len(max_result) == 2  # (mean, std) each
    assert mean_result[0] == pytest.approx(3.0, abs=0.3)
    assert 3.5 < max_result[0] < 5.0  # E[max of 3 draws from 1..5] ≈ 4.2
    with pytest.raises(ValueError):
        bootstrap_metric([], subset_size=1, reduce_fns=[np.mean])


def test_calc_maj_val_majority_and_tie():
    votes = [{"pred": "A", "val": 0.9}, {"pred": "B", "val": 0.8}, {"pred": "A", "val": 0.7}]
    assert calc_maj_val(votes, vote_key="pred", val_key="val") == 0.9  # first value of the majority "A"
    tie = [{"pred": "A", "val": 0.9}, {"pred": "B", "val": 0.8}, {"pred": "B", "val": 0.7}, {"pred": "A", "val": 0.6}]
    assert calc_maj_val(tie, vote_key="pred", val_key="val") in (0.9, 0.8)


def test_process_validation_metrics_groups_by_source_and_votes_with_pred():
    result = process_validation_metrics(
        ["source1", "source1", "source2"], ["prompt1", "prompt1", "prompt2"], {"score": [0.8, 0.9, 0.7]}, seed=42
    )
    assert set(result) == {"source1", "source2"}
    assert result["source1"]["score"]["mean@2"] == pytest.approx(0.85)
    voted = process_validation_metrics(
        ["s"] * 3, ["p"] * 3, {"score": [0.8, 0.9, 0.7], "pred": ["A", "B", "A"]}, seed=42
    )
    assert "maj@2/mean" in voted["s"]["score"] and "pred" not in voted["s"]  # string variables are not scored
