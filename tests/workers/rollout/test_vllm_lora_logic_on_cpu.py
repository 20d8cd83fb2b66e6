"""vLLM LoRA path, the parts that need no engine: engine kwargs, the base/adapter split of a peft model,
the read-back of vLLM's packed LoRA layers, and the merged-weight fallback when an engine refuses an adapter."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from rollout_testlib import build_handle, forward_log_probs, make_prompts, model_config, rollout_config

from hybridrl.workers.engine.lora import (
    apply_lora,
    base_model_tensors,
    gather_lora_adapter,
    lora_scalings,
    merge_lora_tensors,
    scaled_adapter_tensors,
)
from hybridrl.workers.rollout.base import LoRAAdapterRejected
from hybridrl.workers.rollout.vllm_lora import _effective, _find_layer, lora_engine_kwargs
from hybridrl.workers.rollout.vllm_rollout import build_engine_kwargs

LORA = {"lora_rank": 4, "lora_alpha": 16, "target_modules": "all-linear"}


class _HFConfig:
    max_position_embeddings = 1024
    hidden_size = 64
    num_attention_heads = 2


@pytest.fixture()
def lora_actor(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = apply_lora(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32), model_config(tiny_model_dir, **LORA)
    )
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_" in name:  # non-zero B: a fresh adapter (B = 0) would equal the base model
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    return model.eval()


def test_lora_engine_kwargs_round_the_rank_up_to_what_vllm_serves(caplog):
    assert lora_engine_kwargs(model_config("/m")) == {}
    assert lora_engine_kwargs(model_config("/m", lora_rank=4)) == {
        "enable_lora": True,
        "max_loras": 1,
        "max_lora_rank": 8,
    }
    assert lora_engine_kwargs(model_config("/m", lora_rank=64))["max_lora_rank"] == 64
    assert lora_engine_kwargs(model_config("/m", lora_rank=100))["max_lora_rank"] == 128
    with caplog.at_level(logging.WARNING):
        assert lora_engine_kwargs(model_config("/m", lora_rank=1024)) == {}
    assert "merged weights" in caplog.text


def test_engine_kwargs_enable_lora_only_for_a_lora_actor():
    def kwargs(model: dict, follows_actor: bool = True, **extra) -> dict:
        cfg = rollout_config(name="vllm", engine_kwargs={"vllm": extra})
        return build_engine_kwargs(
            cfg,
            model_config("/m", **model),
            _HFConfig(),
            device_name="cpu",
            follows_actor=follows_actor,
            seed=0,
        )

    assert kwargs(LORA)["enable_lora"] and kwargs(LORA)["max_lora_rank"] == 8
    assert "enable_lora" not in kwargs({})  # no LoRA
    assert "enable_lora" not in kwargs(LORA, follows_actor=False)  # standalone generation: nothing to sync
    assert kwargs(LORA, enable_lora=False)["enable_lora"] is False  # opt-out: merged weights


def test_base_plus_scaled_adapter_equals_the_merged_weights(lora_actor, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    state = dict(lora_actor.state_dict())
    base = dict(base_model_tensors(state.items()))
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert set(base) == set(plain.state_dict())  # HF names, no adapter entries
    adapter = gather_lora_adapter(lora_actor)
    scaled = dict(scaled_adapter_tensors(adapter, lora_scalings(lora_actor), torch.float32))
    merged = dict(merge_lora_tensors(state.items(), lora_scalings(lora_actor)))
    checked = 0
    for name, a in scaled.items():
        if not name.endswith(".lora_A.weight"):
            continue
        scaled_b = scaled[name.replace(".lora_A.", ".lora_B.")]
        hf_name = name.replace("base_model.model.", "").replace(".lora_A.weight", ".weight")
        torch.testing.assert_close(base[hf_name] + scaled_b @ a, merged[hf_name])
        assert (scaled_b @ a).abs().max() > 0.1  # the adapter matters
        checked += 1
    assert checked == 7 * 2  # q, k, v, o, gate, up, down in both layers


def test_read_back_unpacks_vllm_packed_layers():
    a_q, a_k = torch.randn(4, 8), torch.randn(4, 8)
    b_q, b_k = torch.randn(8, 4), torch.randn(6, 4)
    qkv = SimpleNamespace(lora_a=[a_q, a_k, None], lora_b=[b_q, b_k, None], scaling=[1, 2.0, 1])
    o_proj = SimpleNamespace(lora_a=torch.randn(4, 8), lora_b=torch.randn(8, 4), scaling=1)
    loras = {"model.layers.0.self_attn.qkv_proj": qkv, "model.layers.0.self_attn.o_proj": o_proj}
    packed = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}

    layer, slot = _find_layer(loras, packed, "model.layers.0.self_attn.k_proj")
    assert layer is qkv and slot == 1
    assert torch.equal(_effective(layer, slot, "A"), a_k)
    assert torch.equal(_effective(layer, slot, "B"), b_k * 2.0)  # scaling not yet folded into B
    assert _effective(*_find_layer(loras, packed, "model.layers.0.self_attn.v_proj"), "A") is None
    assert _find_layer(loras, packed, "model.layers.0.self_attn.o_proj") == (o_proj, None)
    assert _find_layer(loras, packed, "model.layers.0.mlp.up_proj") == (None, None)


def test_refused_adapter_falls_back_to_merged_weights(tiny_model_dir, tokenizer, lora_actor, caplog):
    handle = build_handle(tiny_model_dir, tokenizer, lora_actor, response_length=6)
    engine = handle.engine
    engine.lora_adapter_mode = True  # an engine that claims a LoRA path, then refuses the adapter

    def refuse(adapter_tensors, peft_config):
        raise LoRAAdapterRejected("vLLM refused the actor's LoRA adapter: unsupported module lm_head")

    engine.load_lora_adapter = refuse
    engine.disable_lora_adapter = lambda: setattr(engine, "lora_adapter_mode", False)
    assert handle.adapter_mode
    with caplog.at_level(logging.WARNING):
        out = handle.generate_sequences(make_prompts(tokenizer, temperature=1.0))
    assert "merged LoRA weights from now on" in caplog.text and not handle.adapter_mode
    assert out.meta_info["metrics"]["rollout/weight_sync_lora_adapter"] == 0.0
    mask = out.batch["attention_mask"][:, -6:].bool()
    expected = forward_log_probs(lora_actor, out, 1.0)  # the peft model's log-probs: merged weights arrived
    torch.testing.assert_close(out.batch["rollout_log_probs"][mask], expected[mask], atol=1e-4, rtol=1e-4)
