"""``agg_loss`` / ``compute_value_loss`` with verl 0.9's global-batch normalisation: hand-computed values for every
mode, the errors, and split invariance (summed micro-batch losses equal the whole mini-batch's)."""

from __future__ import annotations

import pytest
import torch

from hybridrl.algos.aggregation import LOSS_AGG_MODES, GlobalBatchInfo
from hybridrl.trainer.ppo.core_algos import agg_loss, compute_value_loss

ATOL = 1e-5

# one micro-batch: row sums Σ_t ℓ m = (1 + 2, 4) = (3, 4); n = (2, 1); T = 3
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
# the mini-batch around it: D = 2 ranks, N = 10 valid tokens, G = 4 sequences over both ranks
GLOBAL = {"dp_size": 2, "batch_num_tokens": 10, "global_batch_size": 4}


@pytest.mark.parametrize(
    "mode, scale, expected",
    [
        ("token-mean", None, 1.4),  # D·Σℓm/N = 2·7/10
        ("token-sum", None, 14.0),  # D·Σℓm = 2·7
        ("seq-mean-token-sum", None, 3.5),  # D·Σ_i rowsum/G = 2·(3 + 4)/4
        ("seq-mean-token-mean", None, 2.75),  # D·Σ_i rowsum/n_i/G = 2·(1.5 + 4)/4
        ("seq-mean-token-sum-norm", None, 3.5 / 3),  # seq-mean-token-sum / T = 3.5/3
        ("seq-mean-token-sum-norm", 7.0, 0.5),  # ... / loss_scale_factor = 3.5/7
    ],
)
def test_global_normalisation_by_hand(mode, scale, expected):
    loss = agg_loss(LOSS, MASK, mode, loss_scale_factor=scale, **GLOBAL)
    assert loss.item() == pytest.approx(expected, abs=ATOL)


def test_token_sum_local_is_the_plain_masked_sum():
    assert agg_loss(LOSS, MASK, "token-sum").item() == pytest.approx(7.0)  # 1 + 2 + 4


def test_dr_grpo_norm_is_verl_09s_scale_not_05s():
    # verl 0.5: Σ/T = 7/3; verl 0.9: Σ/(rows·T) = 7/(2·3): a factor of the batch size smaller
    assert agg_loss(LOSS, MASK, "seq-mean-token-sum-norm").item() == pytest.approx(7 / 6, abs=ATOL)


@pytest.mark.parametrize(
    "mode, needs",
    [
        ("token-mean", "batch_num_tokens"),
        ("seq-mean-token-sum", "global_batch_size"),
        ("seq-mean-token-mean", "global_batch_size"),
        ("seq-mean-token-sum-norm", "global_batch_size"),
    ],
)
def test_dp_size_above_one_needs_the_global_count(mode, needs):
    with pytest.raises(ValueError, match=needs):
        agg_loss(LOSS, MASK, mode, dp_size=2)
    # token-sum needs no count: D·Σ
    assert agg_loss(LOSS, MASK, "token-sum", dp_size=2).item() == pytest.approx(14.0)


def test_empty_rows_are_left_out_and_an_empty_micro_batch_is_nan_locally_zero_globally():
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    # the second row is fully masked: seq-mean over 1 row → 3 (verl 0.5: (3 + 0)/2)
    assert agg_loss(LOSS, mask, "seq-mean-token-sum").item() == pytest.approx(3.0)
    empty = torch.zeros(2, 3)
    assert torch.isnan(agg_loss(LOSS, empty, "token-mean"))  # 0/0, as verl 0.9
    assert agg_loss(LOSS, empty, "token-mean", **GLOBAL).item() == 0.0  # a share of nothing


def _random_batch(seed: int, rows: int = 6, width: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(rows, width, generator=gen)
    lengths = torch.tensor([1, 5, 2, 4, 3, 5])[:rows]  # different token counts per row
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()
    return loss, mask


SPLITS = [(0, 1), (1, 4), (4, 6)]  # micro-batches of 1, 3 and 2 rows: 1, 9 and 8 tokens


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_summed_micro_batches_equal_the_whole_mini_batch(mode):
    loss, mask = _random_batch(0)
    whole = agg_loss(loss, mask, mode)
    counts = {"batch_num_tokens": int(mask.sum()), "global_batch_size": mask.shape[0]}
    summed = sum(agg_loss(loss[a:b], mask[a:b], mode, **counts) for a, b in SPLITS)
    torch.testing.assert_close(summed, whole)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_two_ranks_averaged_equal_the_whole_mini_batch(mode):
    """DDP / FSDP average the ranks' gradients: the mean of the D-scaled rank losses is the global loss."""
    loss, mask = _random_batch(1)
    counts = {"dp_size": 2, "batch_num_tokens": int(mask.sum()), "global_batch_size": mask.shape[0]}
    ranks = [agg_loss(loss[:3], mask[:3], mode, **counts), agg_loss(loss[3:], mask[3:], mode, **counts)]
    torch.testing.assert_close((ranks[0] + ranks[1]) / 2, agg_loss(loss, mask, mode))


def test_verl_05_per_micro_batch_mean_is_not_split_invariant():
    """What global normalisation fixes: 0.5's token-mean per micro-batch, weighted B_micro / B, moves with the split."""
    loss, mask = _random_batch(0)
    weighted = sum((b - a) / 6 * agg_loss(loss[a:b], mask[a:b], "token-mean") for a, b in SPLITS)
    assert abs(weighted.item() - agg_loss(loss, mask, "token-mean").item()) > 1e-2


def test_value_loss_takes_the_global_arguments():
    vpreds, returns = torch.tensor([[1.0, 2.0], [0.0, 0.5]]), torch.zeros(2, 2)
    values, mask = vpreds.clone(), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # no clipping (V_old = V_pred): ½·agg((V − R)²) with squares (1, 4, 0): token-mean ½·5/3; global ½·2·5/10 = 0.5
    local, clipfrac = compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.5)
    assert local.item() == pytest.approx(5 / 6, abs=ATOL) and clipfrac.item() == 0.0
    glob, _ = compute_value_loss(vpreds, returns, values, mask, 0.5, "token-mean", 2, 10, 4)
    assert glob.item() == pytest.approx(0.5, abs=ATOL)
    # seq-mean-token-sum-norm with loss_scale_factor 5: ½·2·(5 + 0)/4/5 = 0.25
    norm, _ = compute_value_loss(vpreds, returns, values, mask, 0.5, "seq-mean-token-sum-norm", 2, 10, 4, 5.0)
    assert norm.item() == pytest.approx(0.25, abs=ATOL)


def test_global_batch_info_record():
    info = GlobalBatchInfo(dp_size=2, batch_num_tokens=10, global_batch_size=4, loss_scale_factor=None)
    assert info.as_kwargs() == {"dp_size": 2, "batch_num_tokens": 10, "global_batch_size": 4, "loss_scale_factor": None}
    assert info.is_global and not GlobalBatchInfo().is_global


def test_config_validation_accepts_exactly_the_aggregation_modes():
    from hybridrl.config import checks_algorithm

    assert checks_algorithm.LOSS_AGG_MODES == LOSS_AGG_MODES
