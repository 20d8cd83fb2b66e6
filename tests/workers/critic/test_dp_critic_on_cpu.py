"""DataParallelPPOCritic on a tiny Qwen2 token-classification model (num_labels=1) in one process."""

from __future__ import annotations

import copy

import pytest
import torch
from config_testlib import compose_section

from hybridrl.protocol import DataProto
from hybridrl.utils.torch_functional import compute_position_id_with_mask
from hybridrl.workers.critic import DataParallelPPOCritic

PROMPT_LEN, RESPONSE_LEN = 6, 5


@pytest.fixture(scope="module")
def value_model(tiny_model_dir):
    from hybridrl.workers.engine import load_hf_model

    torch.manual_seed(0)  # the score head is freshly initialised
    module, _ = load_hf_model(tiny_model_dir, kind="token_classification", torch_dtype=torch.float32)
    return module


def _batch(batch_size: int = 4, seed: int = 0) -> DataProto:
    """Left-padded prompts + right-padded responses of different lengths, with values/returns."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, 500, (batch_size, PROMPT_LEN + RESPONSE_LEN), generator=gen)
    attention_mask = torch.zeros_like(input_ids)
    for row in range(batch_size):
        attention_mask[row, row % 3 : PROMPT_LEN + RESPONSE_LEN - (row % 4)] = 1
    response_mask = attention_mask[:, PROMPT_LEN:]
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "responses": input_ids[:, PROMPT_LEN:],
        "response_mask": response_mask,
        "values": torch.zeros(batch_size, RESPONSE_LEN),
        "returns": torch.ones(batch_size, RESPONSE_LEN) * response_mask,
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"micro_batch_size": 2, "use_dynamic_bsz": False})


def _config(use_remove_padding: bool = False, **overrides):
    """The shipped ``critic`` section with per-rank sizes; ``use_remove_padding`` is copied in from ``critic.model``
    as the worker does."""
    section = compose_section("critic", **{"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 2, **overrides})
    section.use_remove_padding = use_remove_padding
    return section


def test_values_are_response_slice_of_value_head_and_masked(value_model):
    data = _batch()
    values = DataParallelPPOCritic(_config(), value_model, None).compute_values(data)
    batch = data.batch
    with torch.no_grad():
        head = value_model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits.squeeze(-1)  # [B, S]
    mask = batch["response_mask"].bool()
    assert values.shape == (4, RESPONSE_LEN)
    # value of response token t is read where token t is predicted: position P-1+t
    torch.testing.assert_close(values[mask], head[:, PROMPT_LEN - 1 : -1][mask], rtol=1e-5, atol=1e-6)
    assert bool((values[~mask] == 0).all())
    assert bool((values[mask] != 0).all())


def test_packed_values_equal_padded(value_model):
    data = _batch(batch_size=4, seed=2)
    padded = DataParallelPPOCritic(_config(), value_model, None).compute_values(data)
    packed = DataParallelPPOCritic(_config(use_remove_padding=True), value_model, None).compute_values(data)
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)


def test_update_critic_metrics_and_clipped_loss(value_model):
    """values = 0, returns = 1 and cliprange 0.5: every prediction |V_pred| < 0.5 gives
    (V_clip − R)² = (V_pred − R)², so no clipping and vf_loss = ½·mean_m((V_pred − 1)²)."""
    model = copy.deepcopy(value_model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    critic = DataParallelPPOCritic(_config(ppo_micro_batch_size_per_gpu=4), model, optimizer)
    data = _batch()
    vpreds = critic.compute_values(data)
    assert float(vpreds.abs().max()) < 0.5  # a freshly initialised head predicts small values
    metrics = critic.update_critic(data)
    mask = data.batch["response_mask"].float()
    expected = 0.5 * (((vpreds - 1.0) ** 2) * mask).sum() / mask.sum()
    assert metrics["critic/vf_loss"][0] == pytest.approx(expected.item(), rel=1e-5)
    assert metrics["critic/vf_clipfrac"] == [0.0]
    assert metrics["critic/vpred_mean"][0] == pytest.approx(((vpreds * mask).sum() / mask.sum()).item(), rel=1e-5)
    assert metrics["critic/grad_norm"][0] > 0


def test_update_critic_moves_values_towards_returns(value_model):
    model = copy.deepcopy(value_model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    critic = DataParallelPPOCritic(_config(), model, optimizer)
    data = _batch()
    losses = []
    for _ in range(5):
        losses.append(sum(critic.update_critic(data)["critic/vf_loss"]))
    assert losses[-1] < losses[0]
