"""use_remove_padding in the SFT forward: the packed [1, nnz] row gives the padded batch's loss and gradients."""

from __future__ import annotations

import pytest
import torch

from hybridrl.trainer.sft.forward import micro_batch_loss_sum
from hybridrl.utils.torch_functional import compute_position_id_with_mask


def _micro_batch() -> dict[str, torch.Tensor]:
    """3 right-padded SFT rows (lengths 11, 7, 9 of T = 12): prompt tokens masked out, the last valid position
    masked (it predicts padding), like SFTDataset."""
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 500, (3, 12), generator=gen)
    attention_mask = torch.zeros(3, 12, dtype=torch.long)
    loss_mask = torch.zeros(3, 12, dtype=torch.long)
    for row, (length, prompt) in enumerate([(11, 4), (7, 2), (9, 5)]):
        attention_mask[row, :length] = 1
        loss_mask[row, prompt - 1 : length - 1] = 1  # position t scores token t+1: response tokens prompt..length-1
        input_ids[row, length:] = 0  # pad id
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "loss_mask": loss_mask,
    }


def _loss_and_grads(model, micro, use_remove_padding: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], list]:
    shapes = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: shapes.append((tuple(kwargs["input_ids"].shape), kwargs["attention_mask"] is None)),
        with_kwargs=True,
    )
    model.zero_grad()
    loss_sum = micro_batch_loss_sum(model, micro, use_remove_padding, "cpu")
    loss_sum.backward()
    hook.remove()
    return loss_sum.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, shapes


def test_packed_loss_and_gradients_equal_padded(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    micro = _micro_batch()
    padded_loss, padded_grads, padded_shapes = _loss_and_grads(model, micro, use_remove_padding=False)
    packed_loss, packed_grads, packed_shapes = _loss_and_grads(model, micro, use_remove_padding=True)
    assert padded_shapes == [((3, 12), False)]
    assert packed_shapes == [((1, 11 + 7 + 9), True)]  # one row of the valid tokens, no attention mask
    assert int(micro["loss_mask"].sum()) == 7 + 5 + 4
    # measured: equal losses (a sum of 16 CEs, 98.55), gradients within 1e-6 absolute (7e-7 of the largest)
    torch.testing.assert_close(packed_loss, padded_loss, rtol=1e-6, atol=1e-6)
    assert padded_loss > 16.0  # 16 targets of a random model: CE ≈ log(vocab) each
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)
    assert sum(g.abs().sum() for g in padded_grads.values()) > 0


def test_packed_forward_refuses_a_target_after_the_last_token(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    micro = _micro_batch()
    micro["loss_mask"][1, 6] = 1  # row 1 has 7 tokens: position 6 would score the pad token at 7
    with pytest.raises(ValueError, match=r"rows \[1\].*use_remove_padding=False"):
        micro_batch_loss_sum(model, micro, True, "cpu")
