"""reduce_metrics: mean by default, max/min by key name."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.utils.metric import reduce_metrics


def test_reduce_metrics_mean_max_min_by_key():
    reduced = reduce_metrics(
        {
            "actor/pg_loss": [1.0, 2.0, 6.0],  # mean = 3
            "perf/max_memory_allocated_gb": [2.0, 7.0, 5.0],  # "max" in key → 7
            "response_length/min": [4.0, 1.0, 3.0],  # "min" in key → 1
            "critic/grad_norm": [torch.tensor(1.0), torch.tensor(3.0)],  # tensors are fine → 2
        }
    )
    assert reduced == {
        "actor/pg_loss": 3.0,
        "perf/max_memory_allocated_gb": 7.0,
        "response_length/min": 1.0,
        "critic/grad_norm": 2.0,
    }
    assert all(type(v) is float for v in reduced.values())


def test_reduce_metrics_scalar_and_empty():
    reduced = reduce_metrics({"actor/lr": 0.5, "actor/empty": []})
    assert reduced["actor/lr"] == 0.5
    assert math.isnan(reduced["actor/empty"])


def test_reduce_metrics_max_wins_over_min_when_both_in_key():
    # "max" is checked first, as verl does
    assert reduce_metrics({"global_seqlen/minmax_diff": [1.0, 4.0]})["global_seqlen/minmax_diff"] == pytest.approx(4.0)
