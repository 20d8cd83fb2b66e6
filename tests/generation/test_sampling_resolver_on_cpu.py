"""``resolve_sampling`` by hand: which layer wins (config < meta_info < request < validation < greedy), clamps, and
errors that name the key. Every expected value is written out from the layers in the test's comments."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from hybridrl.generation import RequestParams, call_layer, call_sampling_params, resolve_sampling

EOS = (2, 7)
PAD = 3
META = "meta_info"  # a request's call layer


def rollout(**changes):
    """An ``actor_rollout_ref.rollout`` section with the keys the resolver reads (distinct values per layer)."""
    section = {
        "temperature": 0.9, "top_k": 40, "top_p": 0.8, "do_sample": True, "response_length": 16,
        "ignore_eos": False, "calculate_log_probs": False, "min_tokens": 0,
        "val_kwargs": {"temperature": 0.3, "top_k": 5, "top_p": 0.5, "do_sample": True, "n": 4},
    }  # fmt: skip
    return OmegaConf.create({**section, **changes})


def resolve(config=None, meta_info=None, request=None) -> RequestParams:
    return resolve_sampling(
        config or rollout(), meta_info=meta_info, request=request, eos_token_ids=EOS, pad_token_id=PAD
    )


def settings(resolved: RequestParams) -> tuple:
    p = resolved.sampling
    return p.temperature, p.top_k, p.top_p, p.do_sample, p.max_new_tokens, p.n


# ---------------------------------------------------------------------------- layer by layer


def test_config_alone():
    # nothing overrides the section: (0.9, 40, 0.8), sampling, response_length 16, one sample per row
    assert settings(resolve()) == (0.9, 40, 0.8, True, 16, 1)
    assert resolve().seed is None and resolve().sampling.eos_token_ids == EOS and resolve().sampling.pad_token_id == PAD


def test_meta_info_beats_config():
    # meta_info names temperature 0.5, top_k 7, response_length 4, n 2; top_p stays the config's 0.8
    resolved = resolve(meta_info={"temperature": 0.5, "top_k": 7, "response_length": 4, "n": 2})
    assert settings(resolved) == (0.5, 7, 0.8, True, 4, 2)


def test_request_beats_meta_info_and_config():
    # config temperature 0.9, meta_info 0.5, request 0.6 → 0.6; top_p: config 0.8, request 0.7 → 0.7
    # max_tokens 100 is clamped to the response length meta_info set (4); a request is one sample (n 1)
    resolved = resolve(
        meta_info={"temperature": 0.5, "response_length": 4, "n": 2},
        request={"max_tokens": 100, "temperature": 0.6, "top_p": 0.7, "seed": 11},
    )
    assert settings(resolved) == (0.6, 40, 0.7, True, 4, 1)
    assert resolved.seed == 11


def test_validation_beats_the_request():
    # validate: val_kwargs (0.3, 5, 0.5) replace config (0.9, 40, 0.8), meta_info (0.5) and request (0.6) values
    assert settings(resolve(meta_info={"validate": True, "temperature": 0.5})) == (0.3, 5, 0.5, True, 16, 1)
    resolved = resolve(request={"max_tokens": 8, "temperature": 0.6, META: {"validate": True}})
    assert settings(resolved) == (0.3, 5, 0.5, True, 8, 1)


def test_greedy_beats_everything_and_switches_the_filters_off():
    # do_sample False in meta_info → temperature 0, top_k -1 (off), top_p 1 (off), n 1, whatever came before
    assert settings(resolve(meta_info={"do_sample": False, "n": 4, "temperature": 0.5})) == (0.0, -1, 1.0, False, 16, 1)
    greedy = resolve(request={"max_tokens": 8, "temperature": 0.6, META: {"validate": True, "do_sample": False}})
    assert settings(greedy) == (0.0, -1, 1.0, False, 8, 1)
    assert greedy.sampling.greedy and greedy.sampling.logprob_temperature == 1.0
    # val_kwargs.do_sample False: validation is greedy
    assert settings(
        resolve(
            rollout(val_kwargs={"temperature": 0.3, "top_k": 5, "top_p": 0.5, "do_sample": False}),
            meta_info={"validate": True},
        )
    ) == (0.0, -1, 1.0, False, 16, 1)


def test_config_do_sample_false_is_greedy_unless_a_request_names_a_temperature():
    assert settings(resolve(rollout(do_sample=False))) == (0.0, -1, 1.0, False, 16, 1)
    assert settings(resolve(rollout(do_sample=False), request={"max_tokens": 2})) == (0.0, -1, 1.0, False, 2, 1)
    # the request's temperature 0.5 > 0: it samples, with the config's filters (40, 0.8)
    assert settings(resolve(rollout(do_sample=False), request={"max_tokens": 2, "temperature": 0.5})) == (
        0.5,
        40,
        0.8,
        True,
        2,
        1,
    )
    # a request's temperature 0 is greedy
    assert settings(resolve(request={"max_tokens": 2, "temperature": 0})) == (0.0, -1, 1.0, False, 2, 1)


def test_min_tokens_and_stop_ids():
    # configured min_tokens 6 within max_tokens 8 stays 6; with max_tokens 4 it is clamped to 4
    assert resolve(rollout(min_tokens=6), request={"max_tokens": 8}).sampling.min_new_tokens == 6
    assert resolve(rollout(min_tokens=6), request={"max_tokens": 4}).sampling.min_new_tokens == 4
    # meta_info's stop ids come first, the engine's (2, 7) after, each once; meta_info's pad id wins
    resolved = resolve(meta_info={"eos_token_id": [9, 2], "pad_token_id": 0})
    assert resolved.sampling.eos_token_ids == (9, 2, 7) and resolved.sampling.pad_token_id == 0


# ---------------------------------------------------------------------------- errors name the key


@pytest.mark.parametrize(
    ("request_dict", "error", "message"),
    [
        ({"temperature": 1.0}, KeyError, r"'max_tokens'.*required"),
        ({"max_tokens": 0}, ValueError, r"\['max_tokens'\]=0"),
        ({"max_tokens": 2, "top_k": 1.5}, ValueError, r"\['top_k'\]=1.5: expected an int"),
        ({"max_tokens": 2, "top_p": 1.5}, ValueError, r"\['top_p'\]=1.5"),
        ({"max_tokens": 2, "min_tokens": 3}, ValueError, r"\['min_tokens'\]=3"),
        ({"max_tokens": 2, "ignore_eos": "no"}, ValueError, r"\['ignore_eos'\]='no'"),
        ({"max_tokens": 2, META: {"temperature": 0.1}}, ValueError, r"\['meta_info'\]"),
        ({"max_tokens": 2, "stop": ["x"]}, ValueError, r"unknown keys \['stop'\]"),
    ],
)
def test_request_errors_name_the_key(request_dict, error, message):
    with pytest.raises(error, match=message):
        resolve(request=request_dict)


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="rollout.min_tokens must be an int >= 0"):
        resolve(rollout(min_tokens=-1))
    with pytest.raises(ValueError, match=r"min_tokens=20 exceeds the response length 16"):
        resolve(rollout(min_tokens=20))
    with pytest.raises(ValueError, match="no EOS token id"):
        resolve_sampling(rollout(), meta_info={}, eos_token_ids=(), pad_token_id=PAD)
    with pytest.raises(ValueError, match="no eos_token_ids"):
        resolve_sampling(rollout(), request={"max_tokens": 1}, eos_token_ids=(), pad_token_id=PAD)


# ---------------------------------------------------------------------------- the agent loop's call layer


def test_an_agent_loop_request_resolves_like_the_sync_call():
    # what the agent loop sends (its call's layer + max_tokens) resolves to the sync call's settings
    for meta in ({}, {"validate": True}, {"do_sample": False}, {"validate": True, "do_sample": False}):
        full_meta = {**meta, "global_steps": 3, "eos_token_id": 2}
        request = {"max_tokens": 16, META: call_layer(full_meta)}
        assert call_layer(full_meta) == meta
        assert settings(resolve(request=request)) == settings(resolve(meta_info=meta)), meta
        view = call_sampling_params(rollout(), full_meta)
        resolved = resolve(request=request).sampling
        assert (view["temperature"], view["top_k"], view["top_p"]) == (
            resolved.temperature,
            resolved.top_k,
            resolved.top_p,
        )


# ---------------------------------------------------------------------------- a request's extra stop ids


def test_request_stop_token_ids_join_the_engines_stop_ids():
    # EOS (2, 7) from the engine; the request adds 9 and repeats 7 (kept once, the engine's order first)
    assert resolve(request={"max_tokens": 2, "stop_token_ids": [9, 7]}).sampling.eos_token_ids == (2, 7, 9)
    assert resolve(request={"max_tokens": 2, "stop_token_ids": None}).sampling.eos_token_ids == EOS
    for bad in ("9", [9, "x"], [True], [-1], 9):
        with pytest.raises(ValueError, match=r"\['stop_token_ids'\]"):
            resolve(request={"max_tokens": 2, "stop_token_ids": bad})
