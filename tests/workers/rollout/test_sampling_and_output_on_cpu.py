"""Pure pieces of the rollout: sampling-parameter resolution, filtering, padding, output assembly, consistency."""

from __future__ import annotations

import math

import pytest
import torch
from rollout_testlib import rollout_config

from hybridrl.generation.sampling import collect_eos_token_ids, resolve_sampling_params
from hybridrl.workers.rollout.consistency import (
    RolloutConsistencyError,
    check_rollout_probs_diff,
    compute_rollout_probs_diff_metrics,
)
from hybridrl.workers.rollout.decoding import filter_logits, sample_next_tokens
from hybridrl.workers.rollout.output import build_rollout_tensors, pad_log_probs, pad_responses


def _resolve(meta=None, **cfg):
    return resolve_sampling_params(rollout_config(**cfg), meta or {}, eos_token_ids=[2], pad_token_id=3)


def test_sampling_defaults_and_meta_overrides():
    params = _resolve({"temperature": 0.5, "response_length": 4, "eos_token_id": [7, 2]}, top_k=20, top_p=0.9)
    assert (params.temperature, params.top_k, params.top_p, params.max_new_tokens) == (0.5, 20, 0.9, 4)
    assert params.eos_token_ids == (7, 2)  # meta_info ids first, defaults appended once
    assert params.n == 1 and not params.greedy and params.logprob_temperature == 0.5


def test_do_sample_false_is_greedy():
    params = _resolve({"do_sample": False, "n": 4}, temperature=0.9, top_k=5)
    assert params.greedy and (params.temperature, params.top_k, params.top_p, params.n) == (0.0, -1, 1.0, 1)
    assert params.logprob_temperature == 1.0


def test_validate_uses_val_kwargs():
    cfg = {"val_kwargs": {"top_k": 3, "top_p": 0.5, "temperature": 0.3, "n": 2, "do_sample": True}}
    params = _resolve({"validate": True}, **cfg)
    # n stays 1: the trainer already repeated each validation prompt val_kwargs.n times (verl 0.5)
    assert (params.temperature, params.top_k, params.top_p, params.n, params.greedy) == (0.3, 3, 0.5, 1, False)


def test_invalid_sampling_params_raise():
    with pytest.raises(ValueError, match="top_p"):
        _resolve(top_p=0.0)
    with pytest.raises(ValueError, match="response_length"):
        _resolve(response_length=0)


def test_collect_eos_token_ids_unions_tokenizer_and_generation_config():
    class Tok:
        eos_token_id = 2

    class GenCfg:
        eos_token_id = [5, 2]

    assert collect_eos_token_ids(Tok(), GenCfg()) == (2, 5)


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, top_k=2, top_p=1.0)[0, 2:]).all()
    # top_p 0.7: mass before each sorted token = 0, 0.5, 0.8, 0.95 → keep tokens 0, 1 (0.5 < 0.7), drop 2, 3
    kept = ~torch.isinf(filter_logits(logits, top_k=-1, top_p=0.7)[0])
    assert kept.tolist() == [True, True, False, False]


def test_sample_next_tokens_greedy_log_prob():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]]))
    params = _resolve({"do_sample": False})
    tokens, log_probs = sample_next_tokens(logits, params)
    assert tokens.tolist() == [1]
    assert log_probs.item() == pytest.approx(math.log(0.6), abs=1e-6)


def test_pad_responses_and_log_probs():
    responses = pad_responses([[5, 2], [], [1, 2, 3, 4, 9]], response_length=4, pad_token_id=0)
    assert responses.tolist() == [[5, 2, 0, 0], [0, 0, 0, 0], [1, 2, 3, 4]]  # padded, empty, truncated
    log_probs = pad_log_probs([[-0.5], [-1.0, -2.0]], response_length=3)
    assert log_probs.tolist() == [[-0.5, -1.0, -1.0], [-1.0, -2.0, -1.0]]  # pad value -1 as verl


def test_build_rollout_tensors_masks_and_positions():
    input_ids = torch.tensor([[0, 0, 7, 8], [6, 7, 8, 9]])
    attention_mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    position_ids = torch.tensor([[0, 0, 0, 1], [0, 1, 2, 3]])
    responses = torch.tensor([[4, 2, 0], [4, 5, 6]])  # row 0 ends at EOS=2 then pad 0
    out = build_rollout_tensors(input_ids, attention_mask, position_ids, responses, eos_token_ids=[2])
    assert out["attention_mask"].tolist() == [[0, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]]
    assert out["position_ids"].tolist() == [[0, 0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5, 6]]
    assert out["input_ids"][:, 4:].tolist() == responses.tolist()


def test_rollout_probs_diff_metrics_hand_computed():
    rollout = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.4, 0.1, 0.3]]))
    old = torch.log(torch.tensor([[0.4, 0.2, 0.1], [0.1, 0.1, 0.3]]))
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    metrics = compute_rollout_probs_diff_metrics(rollout, old, mask)
    # valid diffs: |0.5-0.4| = 0.1, |0.2-0.2| = 0, |0.4-0.1| = 0.3 (the 0.8 diff is masked out)
    # mean = 0.4/3 = 0.1333; unbiased std = sqrt(((-0.0333)^2 + (-0.1333)^2 + 0.1667^2)/2) = sqrt(0.0233) = 0.1528
    assert metrics["training/rollout_probs_diff_max"] == pytest.approx(0.3, abs=1e-6)
    assert metrics["training/rollout_probs_diff_mean"] == pytest.approx(0.4 / 3, abs=1e-6)
    assert metrics["training/rollout_probs_diff_std"] == pytest.approx(math.sqrt(0.07 / 3), abs=1e-6)


def test_check_rollout_probs_diff_raises_with_diagnosis():
    metrics = {
        "training/rollout_probs_diff_max": 0.3,
        "training/rollout_probs_diff_mean": 0.1,
        "training/rollout_probs_diff_std": 0.05,
    }
    check_rollout_probs_diff(metrics, bound=0.5)  # within bound
    check_rollout_probs_diff(metrics, bound=None)  # disabled
    with pytest.raises(RolloutConsistencyError, match="rollout.dtype=bfloat16.*stale rollout weights"):
        check_rollout_probs_diff(metrics, bound=0.1, context={"rollout.dtype": "bfloat16"})


def test_min_tokens_is_read_when_added_and_checked():
    assert _resolve().min_new_tokens == 0  # not in verl's YAML: absent means no minimum
    assert _resolve(min_tokens=8).min_new_tokens == 8
    with pytest.raises(ValueError, match=r"rollout.min_tokens=9 exceeds the response length 8"):
        _resolve(min_tokens=9)
    with pytest.raises(ValueError, match=r"rollout.min_tokens must be an int >= 0"):
        _resolve(min_tokens=-1)


def test_banned_tokens_are_never_picked_and_keep_their_unfiltered_log_probs():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.5, 0.0]])
    greedy = _resolve({"do_sample": False})
    tokens, log_probs = sample_next_tokens(logits, greedy, banned=torch.tensor([1]))
    assert tokens.tolist() == [2, 0]
    expected = torch.log_softmax(logits, -1).gather(-1, tokens[:, None])[:, 0]
    torch.testing.assert_close(log_probs, expected)
    sampled = _resolve(temperature=1.0)
    for seed in range(20):
        tokens, _ = sample_next_tokens(logits, sampled, torch.Generator().manual_seed(seed), banned=torch.tensor([0, 1]))
        assert tokens.tolist() == [2, 2]
