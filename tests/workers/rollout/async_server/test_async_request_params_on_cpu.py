"""A request's sampling-params dict → resolved parameters: defaults from the rollout section, clamping, errors."""

from __future__ import annotations

import pytest
import torch
from rollout_testlib import rollout_config

from hybridrl.generation.records import check_prompt_ids
from hybridrl.workers.rollout.async_server import TokenOutput, resolve_request_params
from hybridrl.workers.rollout.async_server.left_padded_cache import merge_rows, trim_leading

EOS = (2, 7)
PAD = 3


def resolve(params, **config):
    return resolve_request_params(params, rollout_config(**config), eos_token_ids=EOS, pad_token_id=PAD)


def test_missing_keys_come_from_the_rollout_section():
    resolved = resolve({"max_tokens": 5}, temperature=0.8, top_k=20, top_p=0.9, calculate_log_probs=False)
    p = resolved.sampling
    assert (p.temperature, p.top_k, p.top_p, p.max_new_tokens) == (0.8, 20, 0.9, 5)
    assert (p.calculate_log_probs, p.ignore_eos, p.eos_token_ids, p.pad_token_id) == (False, False, EOS, PAD)
    assert resolved.seed is None and not p.greedy and p.logprob_temperature == 0.8


def test_request_keys_override_the_section_and_greedy_switches_filters_off():
    resolved = resolve(
        {"max_tokens": 4, "temperature": 0, "top_k": 5, "top_p": 0.5, "logprobs": True, "seed": 11, "ignore_eos": True},
        calculate_log_probs=False,
    )
    p = resolved.sampling
    assert p.greedy and (p.temperature, p.top_k, p.top_p) == (0.0, -1, 1.0)
    assert (p.calculate_log_probs, p.ignore_eos, resolved.seed, p.logprob_temperature) == (True, True, 11, 1.0)
    sampled = resolve({"max_tokens": 4, "temperature": 0.7, "top_k": 5, "top_p": 0.5}).sampling
    assert (sampled.temperature, sampled.top_k, sampled.top_p) == (0.7, 5, 0.5)


def test_do_sample_false_means_greedy_unless_the_request_names_a_temperature():
    assert resolve({"max_tokens": 2}, do_sample=False, temperature=1.0).sampling.greedy
    assert resolve({"max_tokens": 2, "temperature": 0.5}, do_sample=False).sampling.temperature == 0.5


def test_max_tokens_is_required_positive_and_clamped_to_response_length():
    assert resolve({"max_tokens": 100}, response_length=8).sampling.max_new_tokens == 8
    with pytest.raises(KeyError, match="'max_tokens'.*required"):
        resolve({"temperature": 1.0})
    with pytest.raises(ValueError, match="'max_tokens'.*>= 1"):
        resolve({"max_tokens": 0})
    with pytest.raises(ValueError, match=r"\['max_tokens'\]=2.5: expected an int"):
        resolve({"max_tokens": 2.5})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_tokens": 2, "temprature": 1.0}, r"unknown keys \['temprature'\]"),
        ({"max_tokens": 2, "temperature": "hot"}, r"\['temperature'\]='hot'"),
        ({"max_tokens": 2, "temperature": -1.0}, r"\['temperature'\]=-1.0"),
        ({"max_tokens": 2, "top_p": 0.0}, r"\['top_p'\]=0.0"),
        ({"max_tokens": 2, "seed": 1.5}, r"\['seed'\]=1.5"),
        ({"max_tokens": 2, "logprobs": "yes"}, r"\['logprobs'\]='yes'"),
    ],
)
def test_bad_values_name_the_key(params, message):
    with pytest.raises(ValueError, match=message):
        resolve(params)


def test_prompt_ids_are_checked():
    assert check_prompt_ids(torch.tensor([4, 5, 6])) == [4, 5, 6]
    for bad in ([], [1, -2], [1, "a"], [True, 2]):
        with pytest.raises(ValueError, match="prompt_ids"):
            check_prompt_ids(bad)


def test_token_output_fields():
    out = TokenOutput(token_ids=[5, 2], log_probs=[-0.1, -0.2], stop_reason="stop")
    assert (out.token_ids, out.log_probs, out.stop_reason) == ([5, 2], [-0.1, -0.2], "stop")


def _cache(keys: torch.Tensor):
    """A real ``DynamicCache`` with one layer: ``keys [B, H, T, D]``, values ``-keys``."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=[(keys, -keys)])


def test_merge_rows_pads_the_shorter_cache_on_the_left_and_trim_drops_leading_columns():
    running = _cache(torch.tensor([1.0, 2.0]).view(1, 1, 2, 1))  # one row, T=2
    new = _cache(torch.tensor([[3.0, 4.0, 5.0], [0.0, 6.0, 7.0]]).view(2, 1, 3, 1))  # two rows, T=3
    merged, mask = merge_rows(running, torch.tensor([[1, 1]]), new, torch.tensor([[1, 1, 1], [0, 1, 1]]))
    keys = merged.layers[0].keys.view(3, 3)
    assert keys.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [0.0, 6.0, 7.0]]
    assert merged.layers[0].values.view(3, 3).tolist() == (-keys).tolist()
    assert mask.tolist() == [[0, 1, 1], [1, 1, 1], [0, 1, 1]]
    merged.layers[0].keys, merged.layers[0].values = keys[[0, 2]].view(2, 1, 3, 1), -keys[[0, 2]].view(2, 1, 3, 1)
    trimmed = trim_leading(merged, mask[[0, 2]], 1)
    assert trimmed.tolist() == [[1, 1], [1, 1]]
    assert merged.layers[0].keys.view(2, 2).tolist() == [[1.0, 2.0], [6.0, 7.0]]


def test_min_tokens_from_the_request_or_the_section_within_max_tokens():
    assert resolve({"max_tokens": 5}).sampling.min_new_tokens == 0
    assert resolve({"max_tokens": 5, "min_tokens": 3}).sampling.min_new_tokens == 3
    assert resolve({"max_tokens": 5}, min_tokens=4).sampling.min_new_tokens == 4
    assert resolve({"max_tokens": 2}, min_tokens=4).sampling.min_new_tokens == 2  # a short turn: clamped
    with pytest.raises(ValueError, match="min_tokens"):
        resolve({"max_tokens": 5, "min_tokens": 6})
