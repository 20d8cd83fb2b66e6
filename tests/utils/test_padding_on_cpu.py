"""Remove-padding helpers: pack valid tokens into one row and scatter back."""

from __future__ import annotations

import pytest
import torch

from hybridrl.utils.remove_padding import pack_sequences, pad_input, unpad_input
from hybridrl.utils.torch_functional import compute_position_id_with_mask


def test_pack_left_and_right_padded_rows():
    # row 0: left pad 1, tokens 11 12 13; row 1: tokens 21 22, right pad 2
    input_ids = torch.tensor([[0, 11, 12, 13], [21, 22, 0, 0]])
    attention_mask = torch.tensor([[0, 1, 1, 1], [1, 1, 0, 0]])
    packed = pack_sequences(input_ids, attention_mask, compute_position_id_with_mask(attention_mask))
    assert packed.input_ids.tolist() == [[11, 12, 13, 21, 22]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 0, 1]]  # restarts at each sequence
    assert packed.indices.tolist() == [1, 2, 3, 4, 5]  # flat positions in the 2×4 batch
    assert packed.cu_seqlens.tolist() == [0, 3, 5]
    # round trip: per-token values land back where the tokens were, zeros on padding
    restored = packed.pad(packed.input_ids.squeeze(0))
    assert restored.tolist() == (input_ids * attention_mask).tolist()


def test_unpad_pad_round_trip_with_feature_dim():
    hidden = torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 3, 2)
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    packed, indices, cu_seqlens, max_seqlen = unpad_input(hidden, mask)
    assert packed.shape == (4, 2) and max_seqlen == 2 and cu_seqlens.tolist() == [0, 2, 4]
    restored = pad_input(packed, indices, batch=2, seqlen=3)
    torch.testing.assert_close(restored, hidden * mask.unsqueeze(-1))


def test_positions_must_restart_at_zero():
    input_ids = torch.tensor([[5, 6], [7, 8]])
    attention_mask = torch.ones_like(input_ids)
    with pytest.raises(ValueError, match="restart at 0"):
        pack_sequences(input_ids, attention_mask, torch.tensor([[0, 1], [1, 2]]))


def test_packed_forward_isolates_sequences(tiny_model_dir):
    """transformers' sdpa path builds a block-diagonal mask from restarting position_ids: the packed
    logits of each sequence equal its logits when run alone."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    first, second = torch.tensor([[40, 41, 42]]), torch.tensor([[50, 51]])
    packed_ids = torch.cat([first, second], dim=1)
    positions = torch.tensor([[0, 1, 2, 0, 1]])
    with torch.no_grad():
        packed = model(input_ids=packed_ids, position_ids=positions, attention_mask=None, use_cache=False).logits
        alone = model(input_ids=second, use_cache=False).logits
    torch.testing.assert_close(packed[:, 3:], alone, rtol=1e-5, atol=1e-5)


def test_all_padding_columns_counts_shared_padding_on_both_sides():
    from hybridrl.utils.remove_padding import all_padding_columns

    mask = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 0]])
    assert all_padding_columns(mask) == (1, 1)  # column 0 and column 5 are padding in both rows
    assert all_padding_columns(torch.ones(2, 3)) == (0, 0)
    assert all_padding_columns(torch.zeros(2, 3)) == (0, 0)
