"""The Megatron policy worker behind a Ray worker group: 2 workers at TP=2 (DP=1) act as one data-parallel rank.

The driver sends the whole batch to both TP ranks and keeps TP rank 0's output (verl 0.5's Megatron dispatch), so
``compute_log_prob`` on 4 rows returns 4 rows, equal to HF's log-probs of the same model (fp32, < 1e-5).
"""

from __future__ import annotations

import pytest
from megatron_testlib import hf_response_log_probs, policy_batch, policy_config

pytestmark = pytest.mark.slow


def test_tp2_worker_group_dispatches_one_slice_per_tp_group(ray_cluster, tiny_gqa_qwen2_dir):
    from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from hybridrl.workers.megatron.worker import MegatronActorRolloutRefWorker

    config = policy_config(tiny_gqa_qwen2_dir, 2, "actor_rollout_ref.rollout.response_length=4")
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1, name_prefix="megatron_tp2")
    worker_class = RayClassWithInitArgs(ray_cluster.remote(MegatronActorRolloutRefWorker), config=config,
                                        role="actor_rollout")
    group = RayWorkerGroup(pool, worker_class, device_name="cpu", worker_env={"HYBRIDRL_DEVICE": "cpu"})
    try:
        group.init_model()
        data = policy_batch(seed=1)
        log_probs = group.compute_log_prob(data).batch["old_log_probs"]
        assert log_probs.shape == (4, 5)  # one TP group = one DP rank: the batch is not split, TP rank 0 kept
        mask = data.batch["response_mask"].bool()
        expected = hf_response_log_probs(tiny_gqa_qwen2_dir, data)
        assert (log_probs - expected)[mask].abs().max().item() < 1e-5
        data.batch["old_log_probs"] = log_probs
        metrics = group.update_actor(data).meta_info["metrics"]
        (grad_norms,) = metrics["actor/grad_norm"]  # one collected worker (TP rank 0), one mini-batch
        assert len(grad_norms) == 1 and grad_norms[0] > 0
        prompts = policy_batch(seed=2).select(batch_keys=["input_ids", "attention_mask", "position_ids"])
        for key in ("input_ids", "attention_mask", "position_ids"):
            prompts.batch[key] = prompts.batch[key][:, :6]
        prompts.meta_info["do_sample"] = False
        generated = group.generate_sequences(prompts)  # DP over both ranks (2 rows each), weights synced first
        assert generated.batch["responses"].shape == (4, 4)
        verified = generated.meta_info["metrics"]["rollout/weight_sync_verified_tensors"]  # one entry per worker
        assert len(verified) == 2 and min(verified) > 0
    finally:
        group.kill()
        pool.release()
