"""DataParallelDPOActor on the tiny Qwen2 model in one process (plain module, fp32, CPU)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from config_testlib import compose_section

from hybridrl.algos.dpo_losses import sequence_log_prob, split_pairs
from hybridrl.protocol import DataProto
from hybridrl.recipes.online_dpo.dpo_actor import DataParallelDPOActor, DPOHyperParams, dpo_micro_rows
from hybridrl.recipes.online_dpo.pairs import PAIR_WEIGHT_KEY
from hybridrl.utils.torch_functional import compute_position_id_with_mask

PROMPT_LEN, RESPONSE_LEN = 4, 3


@pytest.fixture(scope="module")
def causal_lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


def _config(use_remove_padding: bool = False, **overrides):
    """The shipped actor section (micro-batch 4, a 64-token budget); ``use_remove_padding`` as the worker copies it."""
    values = {"ppo_micro_batch_size_per_gpu": 4, "ppo_max_token_len_per_gpu": 64, **overrides}
    section = compose_section("actor_rollout_ref.actor", **values)
    section.use_remove_padding = use_remove_padding
    return section


def _pair_batch(num_pairs: int, weights: list[float] | None = None, seed: int = 0) -> DataProto:
    """Pairs sharing a prompt within the pair, different random responses; the rejected one is 1 token shorter."""
    gen = torch.Generator().manual_seed(seed)
    rows = 2 * num_pairs
    prompts = torch.randint(5, 500, (num_pairs, PROMPT_LEN), generator=gen).repeat_interleave(2, dim=0)
    responses = torch.randint(5, 500, (rows, RESPONSE_LEN), generator=gen)
    response_mask = torch.ones(rows, RESPONSE_LEN, dtype=torch.long)
    response_mask[1::2, -1] = 0
    attention_mask = torch.cat([torch.ones(rows, PROMPT_LEN, dtype=torch.long), response_mask], dim=-1)
    row_weights = [w for w in (weights or [1.0] * num_pairs) for _ in range(2)]
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=-1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": response_mask,
        PAIR_WEIGHT_KEY: torch.tensor(row_weights),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def _sequence_log_probs(model, data: DataProto) -> torch.Tensor:
    actor = DataParallelDPOActor(_config(), model)
    data.meta_info.update(micro_batch_size=8, use_dynamic_bsz=False)
    log_probs, _ = actor.compute_log_prob(data)
    return sequence_log_prob(log_probs, data.batch["response_mask"])


def _with_reference(model, data: DataProto, beta: float = 0.1) -> DataProto:
    """Reference = the model before training (what compute_ref_log_prob returns), + the DPO meta."""
    actor = DataParallelDPOActor(_config(), model)
    data.meta_info.update(micro_batch_size=8, use_dynamic_bsz=False)
    data.batch["ref_log_prob"], _ = actor.compute_log_prob(data)
    data.meta_info.update(DPOHyperParams(beta, "sigmoid", 0.0).as_meta())
    return data


def _train(model, data: DataProto, lr: float, steps: int = 1, **config) -> tuple[torch.nn.Module, dict]:
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    actor = DataParallelDPOActor(_config(**config), model, optimizer)
    metrics: dict = {}
    for _ in range(steps):
        metrics = actor.update_policy_dpo(data, num_pairs_per_rank=float(data.batch[PAIR_WEIGHT_KEY].sum()) / 2)
    return model, metrics


def test_first_update_metrics_and_direction(causal_lm):
    data = _with_reference(causal_lm, _pair_batch(3))
    # the first update's metrics come from the forward before its step, where policy == reference:
    # h = 0 → loss −log σ(0) = log 2 = 0.693147, implicit rewards 0
    _, first = _train(causal_lm, data, lr=0.5)
    trained, metrics = _train(causal_lm, data, lr=0.5, steps=3)  # metrics of the 3rd update
    assert first["actor/dpo_loss"][0] == pytest.approx(math.log(2), abs=1e-5)
    assert first["actor/rewards_chosen"][0] == pytest.approx(0.0, abs=1e-5)
    assert first["actor/grad_norm"][0] > 0
    before, after = _sequence_log_probs(causal_lm, data), _sequence_log_probs(trained, data)
    (chosen_before, rejected_before), (chosen_after, rejected_after) = split_pairs(before), split_pairs(after)
    margin_gain = (chosen_after - rejected_after) - (chosen_before - rejected_before)
    assert bool((margin_gain > 0).all()), margin_gain  # every pair's preference grew
    assert chosen_after.mean() > chosen_before.mean() and rejected_after.mean() < rejected_before.mean()
    assert metrics["actor/reward_accuracy"][0] == 1.0 and metrics["actor/dpo_loss"][0] < math.log(2)


def test_padding_pairs_do_not_change_the_update(causal_lm):
    # [pair A, pair B with weight 0] trains exactly like [pair A] alone (same denominator, 1 real pair)
    padded = _with_reference(causal_lm, _pair_batch(2, weights=[1.0, 0.0]))
    alone = _with_reference(causal_lm, padded.select_idxs([0, 1]))
    model_padded, metrics_padded = _train(causal_lm, padded, lr=0.5)
    model_alone, metrics_alone = _train(causal_lm, alone, lr=0.5)
    for p_padded, p_alone in zip(model_padded.parameters(), model_alone.parameters()):
        torch.testing.assert_close(p_padded, p_alone, rtol=1e-6, atol=1e-7)
    assert metrics_padded["actor/dpo_loss"] == pytest.approx(metrics_alone["actor/dpo_loss"], abs=1e-6)


def test_micro_batches_accumulate_to_the_full_batch(causal_lm):
    # 4 pairs in micro-batches of 2 rows (1 pair) ≡ one micro-batch of 8 rows (grad accumulation)
    data = _with_reference(causal_lm, _pair_batch(4, seed=1))
    small, _ = _train(causal_lm, data, lr=0.5, ppo_micro_batch_size_per_gpu=2)
    full, _ = _train(causal_lm, data, lr=0.5, ppo_micro_batch_size_per_gpu=8)
    for p_small, p_full in zip(small.parameters(), full.parameters()):
        torch.testing.assert_close(p_small, p_full, rtol=1e-5, atol=1e-6)


def test_micro_rows_are_even_and_errors():
    assert dpo_micro_rows(_config(ppo_micro_batch_size_per_gpu=5), 10) == 4
    assert dpo_micro_rows(_config(ppo_micro_batch_size_per_gpu=1), 10) == 2
    assert dpo_micro_rows(_config(use_dynamic_bsz=True, ppo_max_token_len_per_gpu=64), 10) == 6  # 64 // 10 = 6
    with pytest.raises(ValueError, match="ppo_micro_batch_size_per_gpu"):
        dpo_micro_rows(_config(ppo_micro_batch_size_per_gpu=None), 10)
    with pytest.raises(KeyError, match="dpo_beta"):
        DPOHyperParams.from_meta({"temperature": 1.0})
