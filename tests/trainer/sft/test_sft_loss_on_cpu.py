"""The SFT loss: masked next-token CE sums, and the global token mean under micro-batching."""

import math

import torch

from hybridrl.trainer.sft.loss import masked_token_loss_sum, num_target_tokens


def test_masked_token_loss_sum_hand_computed():
    # B=1, T=3, V=2. Position t predicts token t+1: labels = input_ids[1:] = [1, 0].
    # logits row 0 = [0, 0]   -> CE(label 1) = log 2
    # logits row 1 = [0, ln 3] -> p(label 0) = 1 / (1 + 3) -> CE = log 4
    # loss_mask [1, 1, 0]: positions 0 and 1 count (the last position predicts nothing).
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)], [5.0, -5.0]]])
    input_ids = torch.tensor([[0, 1, 0]])
    loss_mask = torch.tensor([[1, 1, 0]])
    total = masked_token_loss_sum(logits, input_ids, loss_mask)
    torch.testing.assert_close(total, torch.tensor(math.log(2.0) + math.log(4.0)))
    assert int(num_target_tokens(loss_mask)) == 2
    # masking position 1 leaves log 2 only
    torch.testing.assert_close(
        masked_token_loss_sum(logits, input_ids, torch.tensor([[1, 0, 0]])), torch.tensor(math.log(2.0))
    )


def test_micro_batches_scaled_by_global_tokens_equal_the_full_batch_gradient():
    """Σ_m backward(S_m / N) ≡ backward(S / N): grad accumulation gives the token mean of the whole batch,
    even when micro batches hold different numbers of target tokens (verl 0.5's mean of means would not)."""
    torch.manual_seed(0)
    weight = torch.randn(4, 6, requires_grad=True)  # a "model": logits = embedding(ids) @ weight
    embed = torch.randn(6, 4)
    input_ids = torch.randint(0, 6, (4, 5))
    loss_mask = torch.tensor([[1, 1, 1, 1, 0], [0, 0, 1, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 1, 0]])

    def loss_sum(rows):
        return masked_token_loss_sum(embed[input_ids[rows]] @ weight, input_ids[rows], loss_mask[rows])

    num_tokens = num_target_tokens(loss_mask)  # 4 + 1 + 2 + 3 = 10
    assert int(num_tokens) == 10
    (loss_sum(slice(0, 4)) / num_tokens).backward()
    full_grad = weight.grad.clone()
    weight.grad = None
    for rows in (slice(0, 2), slice(2, 4)):
        (loss_sum(rows) / num_tokens).backward()
    torch.testing.assert_close(weight.grad, full_grad)
