"""Expert-load counts and verl 0.9's violation metrics on hand-built routing."""

from __future__ import annotations

import pytest
import torch

from hybridrl.algos.moe_load import expert_load_counts, load_balance_metrics


def _routing() -> torch.Tensor:
    """3 tokens, 2 layers, top-2 of 4 experts: [N=3, L=2, k=2]."""
    layer0 = [[0, 1], [0, 1], [0, 2]]  # counts 3, 2, 1, 0
    layer1 = [[0, 1], [2, 3], [1, 2]]  # counts 1, 2, 2, 1
    return torch.tensor([layer0, layer1]).transpose(0, 1)


def test_counts_per_layer():
    counts = expert_load_counts(_routing(), num_experts=4)
    assert counts.tolist() == [[3, 2, 1, 0], [1, 2, 2, 1]]
    assert counts.sum(dim=1).tolist() == [6, 6]  # N * k in every layer


def test_violation_metrics_hand_computed():
    metrics = load_balance_metrics(expert_load_counts(_routing(), 4), prefix="actor/moe")
    # layer 0: shares 3/6, 2/6, 1/6, 0 -> vio = 4 f - 1 = 1, 1/3, -1/3, -1
    assert metrics["actor/moe/max_vio/layer_0"] == pytest.approx(1.0)
    assert metrics["actor/moe/min_vio/layer_0"] == pytest.approx(-1.0)
    assert metrics["actor/moe/avg_vio/layer_0"] == pytest.approx((1 + 1 / 3 + 1 / 3 + 1) / 4)
    # layer 1: shares 1/6, 2/6, 2/6, 1/6 -> vio = -1/3, 1/3, 1/3, -1/3
    assert metrics["actor/moe/max_vio/layer_1"] == pytest.approx(1 / 3)
    assert metrics["actor/moe/min_vio/layer_1"] == pytest.approx(-1 / 3)
    assert metrics["actor/moe/avg_vio/layer_1"] == pytest.approx(1 / 3)
    # summaries over the layers: max and mean
    assert metrics["actor/moe/max_vio/max"] == pytest.approx(1.0)
    assert metrics["actor/moe/max_vio/avg"] == pytest.approx((1 + 1 / 3) / 2)
    assert metrics["actor/moe/min_vio/max"] == pytest.approx(-1 / 3)
    assert metrics["actor/moe/min_vio/avg"] == pytest.approx((-1 - 1 / 3) / 2)
    assert metrics["actor/moe/avg_vio/max"] == pytest.approx(2 / 3)
    assert metrics["actor/moe/avg_vio/avg"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert len(metrics) == 3 * 2 + 6


def test_balanced_load_has_no_violation():
    metrics = load_balance_metrics(torch.tensor([[5, 5, 5, 5]]), prefix="p")
    assert metrics["p/max_vio/max"] == 0.0 and metrics["p/min_vio/max"] == 0.0 and metrics["p/avg_vio/avg"] == 0.0


def test_bad_expert_ids_are_refused():
    with pytest.raises(ValueError, match="outside"):
        expert_load_counts(torch.tensor([[[0, 4]]]), num_experts=4)
    with pytest.raises(ValueError, match="tokens, layers, top_k"):
        expert_load_counts(torch.tensor([[0, 1]]), num_experts=4)
