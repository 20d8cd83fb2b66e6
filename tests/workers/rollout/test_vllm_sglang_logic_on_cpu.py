"""Pure logic of the vLLM and SGLang rollouts (no engine needed)."""

from __future__ import annotations

import pytest
from rollout_testlib import model_config, rollout_config

from hybridrl.generation.sampling import resolve_sampling_params
from hybridrl.workers.rollout.vllm_rollout import (
    build_engine_kwargs,
    check_model_fits,
    tied_head_entries,
    to_vllm_sampling_kwargs,
)


class _HFConfig:
    max_position_embeddings = 1024
    hidden_size = 64
    num_attention_heads = 2


def test_build_engine_kwargs_from_verl_keys():
    cfg = rollout_config(
        name="vllm",
        dtype="bfloat16",
        load_format="dummy_dtensor",
        max_num_batched_tokens=8192,
        engine_kwargs={"vllm": {"swap_space": None, "kv_cache_dtype": "auto"}},
    )
    kwargs = build_engine_kwargs(cfg, model_config("/m"), _HFConfig(), device_name="cpu", follows_actor=True, seed=3)
    assert kwargs["model"] == "/m" and kwargs["dtype"] == "bfloat16" and kwargs["load_format"] == "dummy"
    assert kwargs["max_model_len"] == 32 + 8  # prompt_length + response_length
    assert kwargs["kv_cache_dtype"] == "auto" and "swap_space" not in kwargs  # None values are not passed
    assert "gpu_memory_utilization" not in kwargs  # CPU engine
    gpu = build_engine_kwargs(
        rollout_config(name="vllm", tensor_model_parallel_size=2),
        model_config("/m"),
        _HFConfig(),
        device_name="cuda",
        follows_actor=False,
        seed=0,
    )
    assert gpu["distributed_executor_backend"] == "external_launcher" and gpu["load_format"] == "auto"


def test_check_model_fits_errors_name_the_keys():
    with pytest.raises(ValueError, match="max_position_embeddings"):
        check_model_fits(rollout_config(prompt_length=1000, response_length=100), _HFConfig(), "cpu")
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        check_model_fits(rollout_config(max_num_batched_tokens=16), _HFConfig(), "cpu")

    class Head16(_HFConfig):
        num_attention_heads = 4  # head_dim 16

    with pytest.raises(ValueError, match="head_dim"):
        check_model_fits(rollout_config(), Head16(), "cpu")


def test_vllm_sampling_kwargs():
    params = resolve_sampling_params(rollout_config(top_k=-1), {"eos_token_id": 9}, eos_token_ids=[2], pad_token_id=3)
    kwargs = to_vllm_sampling_kwargs(params)
    assert kwargs["stop_token_ids"] == [9, 2] and kwargs["logprobs"] == 0 and kwargs["top_k"] == -1
    greedy = to_vllm_sampling_kwargs(
        resolve_sampling_params(
            rollout_config(), {"do_sample": False, "ignore_eos": True}, eos_token_ids=[2], pad_token_id=3
        )
    )
    assert greedy["temperature"] == 0.0 and greedy["stop_token_ids"] == [] and greedy["ignore_eos"]
    assert kwargs["min_tokens"] == 0
    with_min = resolve_sampling_params(rollout_config(min_tokens=6), {}, eos_token_ids=[2], pad_token_id=3)
    assert to_vllm_sampling_kwargs(with_min)["min_tokens"] == 6  # verl forwards +rollout.min_tokens to vLLM too


def test_tied_models_reload_the_embedding_as_lm_head_too():
    """vLLM's in-place reload keeps a tied lm_head on its old tensor unless the bucket names it (the Megatron export
    and HF named_parameters() omit it): the vLLM engine adds it, once, only for tied models."""
    import torch

    embed, norm = torch.ones(4, 2), torch.ones(2)
    bucket = [("model.embed_tokens.weight", embed), ("model.norm.weight", norm)]
    assert tied_head_entries(bucket, tied=True) == [("lm_head.weight", embed)]
    assert tied_head_entries(bucket, tied=False) == []
    assert tied_head_entries([*bucket, ("lm_head.weight", embed)], tied=True) == []
    assert tied_head_entries([("model.norm.weight", norm)], tied=True) == []


def test_sglang_engine_kwargs_and_sampling():
    from hybridrl.workers.rollout.sglang_rollout import build_engine_kwargs as sglang_kwargs
    from hybridrl.workers.rollout.sglang_rollout import to_sglang_sampling_params

    cfg = rollout_config(name="sglang", engine_kwargs={"sglang": {"attention_backend": None}})
    kwargs = sglang_kwargs(cfg, model_config("/m"), follows_actor=True, seed=1)
    assert kwargs["model_path"] == "/m" and kwargs["load_format"] == "dummy" and kwargs["context_length"] == 40
    assert "attention_backend" not in kwargs
    params = resolve_sampling_params(rollout_config(), {"do_sample": False}, eos_token_ids=[2], pad_token_id=3)
    assert to_sglang_sampling_params(params)["temperature"] == 0.0
    with_min = resolve_sampling_params(rollout_config(min_tokens=6), {}, eos_token_ids=[2], pad_token_id=3)
    assert to_sglang_sampling_params(with_min)["min_new_tokens"] == 6


def test_sglang_output_parsing():
    from hybridrl.workers.rollout.sglang_rollout import parse_output

    out = {"output_ids": [5, 2], "meta_info": {"output_token_logprobs": [(-0.5, 5, None), (-1.25, 2, None)]}}
    assert parse_output(out, True) == ([5, 2], [-0.5, -1.25])
    assert parse_output(out, False) == ([5, 2], None)


def test_missing_engines_name_the_extra(monkeypatch):
    import sys

    from hybridrl.workers.rollout.sglang_rollout import import_sglang

    monkeypatch.setitem(sys.modules, "sglang", None)  # makes `import sglang` raise ImportError
    with pytest.raises(ImportError, match=r"hybridrl\[sglang\]"):
        import_sglang()
