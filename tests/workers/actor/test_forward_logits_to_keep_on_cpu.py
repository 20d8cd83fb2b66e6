"""The LM head runs on response positions only (``logits_to_keep``) and the padded forward skips columns that
are padding in every row: log-probs, entropies and gradients equal those of the full forward on valid tokens,
in the padded and the packed layout."""

from __future__ import annotations

import pytest
import torch

from hybridrl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
from hybridrl.workers.actor.forward import _keeps_logits, forward_response, skipped_columns
from tests.workers.actor.conftest import make_ppo_batch


class FullLogitsOnly(torch.nn.Module):
    """The same model behind a forward without ``logits_to_keep``: the unoptimised path."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, use_cache):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=use_cache)


def token_fn(logits, next_tokens):
    return [logprobs_from_logits(logits, next_tokens), entropy_from_logits(logits)]


@pytest.mark.parametrize("shared_padding", [False, True])
@pytest.mark.parametrize("use_remove_padding", [False, True])
def test_response_only_head_matches_full_logits(tiny_model_dir, use_remove_padding, shared_padding):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    reference = FullLogitsOnly(model)
    assert _keeps_logits(model) and not _keeps_logits(reference)
    batch = make_ppo_batch(batch_size=12, vocab=model.config.vocab_size).batch
    if shared_padding:  # rows 2 and 11: prompts of 4/6 tokens, responses of 3 and 2 of 5: 2 + 2 columns skipped
        batch = batch[torch.tensor([2, 11])]
        assert skipped_columns(batch["attention_mask"], batch["responses"].shape[1]) == (2, 2)
    mask = batch["response_mask"].bool()

    fast = forward_response(model, batch, use_remove_padding, token_fn)
    fast_loss = (fast[0] * mask).sum() + (fast[1] * mask).sum()
    fast_loss.backward()
    fast_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    full = forward_response(reference, batch, use_remove_padding, token_fn)
    ((full[0] * mask).sum() + (full[1] * mask).sum()).backward()

    for got, want in zip(fast, full):
        assert got.shape == want.shape == mask.shape
        torch.testing.assert_close(got[mask], want[mask], rtol=1e-5, atol=1e-5)
        if shared_padding and not use_remove_padding:
            assert bool((got[:, -2:] == 0).all())  # skipped columns hold 0
    for got, param in zip(fast_grads, model.parameters()):
        torch.testing.assert_close(got, param.grad, rtol=1e-4, atol=1e-6)


def test_token_classifier_keeps_the_full_forward(tiny_model_dir):
    from transformers import AutoModelForTokenClassification

    critic = AutoModelForTokenClassification.from_pretrained(tiny_model_dir, num_labels=1)
    assert not _keeps_logits(critic)
