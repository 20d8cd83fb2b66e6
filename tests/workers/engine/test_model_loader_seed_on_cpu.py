"""A freshly initialised head (the critic's value head) is the same in every load, and the caller's RNG is untouched."""

from __future__ import annotations

import torch

from hybridrl.workers.engine.model_loader import load_hf_model


def test_value_head_init_is_reproducible_and_leaves_the_global_rng(tiny_model_dir):
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    first, _ = load_hf_model(tiny_model_dir, kind="token_classification")
    assert torch.equal(torch.random.get_rng_state(), before)
    torch.manual_seed(456)  # a different global state must not change the head
    second, _ = load_hf_model(tiny_model_dir, kind="token_classification")
    head = [name for name, _ in first.named_parameters() if name.startswith("score")]
    assert head, [name for name, _ in first.named_parameters()][-3:]
    assert first.get_parameter("score.weight").abs().sum() > 0  # randomly initialised, not zeros
    for name in head:
        assert torch.equal(first.get_parameter(name), second.get_parameter(name)), name
