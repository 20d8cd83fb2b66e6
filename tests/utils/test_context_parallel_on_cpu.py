"""Context-parallel split / merge (hybridrl.utils.context_parallel): by hand, round trips, and a 2-rank gloo gather."""

from __future__ import annotations

import pytest
import torch

from hybridrl.utils.context_parallel import (
    all_gather_pieces,
    local_slots,
    merge_rank_pieces,
    plan_context_parallel,
    rank_chunks,
    split_for_rank,
    valid_slots,
)
from tests.workers.engine.engine_testlib import run_ranks


def test_cp2_length_8_by_hand():
    # 8 tokens, C=2: 2·C = 4 chunks of 2; rank 0 keeps chunks 0 and 3, rank 1 chunks 1 and 2
    plan = plan_context_parallel([8], cp_size=2)
    tokens = torch.arange(10, 18)  # t0..t7 = 10..17
    assert rank_chunks(2, 0) == (0, 3) and rank_chunks(2, 1) == (1, 2)
    assert split_for_rank(tokens, plan, 0).tolist() == [10, 11, 16, 17]
    assert split_for_rank(tokens, plan, 1).tolist() == [12, 13, 14, 15]
    assert plan.cu_seqlens_padded().tolist() == [0, 8] and plan.local_length == 4


def test_padding_and_two_sequences_by_hand():
    # lengths 5 and 3, C=2: padded to multiples of 4 → 8 and 4; T = 12, each rank 6 slots
    plan = plan_context_parallel([5, 3], cp_size=2)
    assert plan.padded_lengths == (8, 4) and plan.total_padded == 12 and plan.max_seqlen == 8
    assert plan.cu_seqlens_padded().tolist() == [0, 8, 12]
    assert valid_slots(plan).tolist() == [0, 1, 2, 3, 4, 8, 9, 10]
    # sequence 0 (chunks of 2 in slots 0..7), sequence 1 (chunks of 1 in slots 8..11)
    assert local_slots(plan, 0).tolist() == [0, 1, 6, 7, 8, 11]
    assert local_slots(plan, 1).tolist() == [2, 3, 4, 5, 9, 10]
    tokens = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8])  # a = 1..5, b = 6..8
    assert split_for_rank(tokens, plan, 0, pad_value=-1).tolist() == [1, 2, -1, -1, 6, -1]
    assert split_for_rank(tokens, plan, 1, pad_value=-1).tolist() == [3, 4, 5, -1, 7, 8]


def test_align_multiplies_the_padding_multiple():
    # C=2, align (TP) 3: multiples of 12
    assert plan_context_parallel([1, 12, 13], cp_size=2, align=3).padded_lengths == (12, 12, 24)


@pytest.mark.parametrize("cp_size", [1, 2, 3, 4])
@pytest.mark.parametrize("lengths", [[8], [1], [7], [5, 3], [13, 1, 8, 2], [31, 17]])
def test_split_then_merge_is_identity(cp_size, lengths):
    """split on every rank → all-gather (simulated: the pieces by rank) → merge == the valid tokens, with features."""
    plan = plan_context_parallel(lengths, cp_size)
    nnz = sum(lengths)
    values = torch.randn(nnz, 3)
    pieces = [split_for_rank(values, plan, rank) for rank in range(cp_size)]
    assert all(piece.shape == (plan.local_length, 3) for piece in pieces)
    torch.testing.assert_close(merge_rank_pieces(pieces, plan), values, rtol=0, atol=0)
    torch.testing.assert_close(merge_rank_pieces(torch.stack(pieces), plan), values, rtol=0, atol=0)


@pytest.mark.parametrize("cp_size", [2, 3])
def test_every_slot_belongs_to_exactly_one_rank(cp_size):
    plan = plan_context_parallel([9, 4, 6], cp_size)
    slots = torch.cat([local_slots(plan, rank) for rank in range(cp_size)])
    assert sorted(slots.tolist()) == list(range(plan.total_padded))


def test_merge_is_differentiable_and_rejects_wrong_shapes():
    plan = plan_context_parallel([3, 2], cp_size=2)
    pieces = torch.randn(2, plan.local_length, requires_grad=True)
    merge_rank_pieces(pieces, plan).sum().backward()
    # exactly the 5 valid tokens get gradient 1, the 3 padding slots 0
    assert pieces.grad.sum().item() == 5 and set(pieces.grad.flatten().tolist()) == {0.0, 1.0}
    with pytest.raises(ValueError, match="expected 2 pieces of 4 tokens"):
        merge_rank_pieces([torch.zeros(3), torch.zeros(3)], plan)


def test_rank_out_of_range_is_refused():
    with pytest.raises(ValueError, match="cp_rank=2"):
        rank_chunks(2, 2)


# ----------------------------------------------------------------------------- 2 gloo ranks


def _gather_on_rank(rank: int, world: int) -> dict:
    """Each rank splits the same values, all-gathers its piece, merges; backward of a loss on the merged values."""
    plan = plan_context_parallel([5, 3, 7], cp_size=world)
    torch.manual_seed(0)
    values = torch.randn(sum(plan.lengths), 2)
    piece = split_for_rank(values, plan, rank).requires_grad_(True)
    merged = merge_rank_pieces(all_gather_pieces(piece, grad_scale=float(world)), plan)
    weights = torch.arange(merged.numel(), dtype=torch.float32).reshape(merged.shape)
    (merged * weights).sum().backward()
    return {"merged": merged.detach(), "values": values, "grad": piece.grad,
            "expected_grad": split_for_rank(weights, plan, rank) * world}


def test_gloo_all_gather_round_trip_and_gradient():
    for out in run_ranks(_gather_on_rank, 2):
        torch.testing.assert_close(out["merged"], out["values"], rtol=0, atol=0)
        # the gradient of the merged values (the weights), split back to this rank's piece, times grad_scale
        torch.testing.assert_close(out["grad"], out["expected_grad"], rtol=0, atol=0)
