"""Actor pool → rollout pool through Ray's object store: the rollout then generates exactly as a hybrid engine
holding the same weights, and a push submitted without waiting is applied before a later generate call."""

from __future__ import annotations

import pytest
import torch
from fsdp_workers_testlib import ppo_batch
from transfer_testlib import make_prompts, policy_config, worker_group

pytestmark = pytest.mark.slow


def test_rollout_pool_follows_the_actor_pool(ray_cluster, tiny_model_dir):
    from transformers import AutoTokenizer

    from hybridrl.workers.sharding_manager.weight_transfer import first_package

    config = policy_config(tiny_model_dir)
    prompts = make_prompts(AutoTokenizer.from_pretrained(tiny_model_dir), do_sample=False)
    # the hybrid engine (actor + its own engine) is the actor group and the reference; the rollout lives apart
    actor_pool, actor_group = worker_group(ray_cluster, config, "actor_rollout", "wt_actor")
    rollout_pool, rollout_group = worker_group(ray_cluster, config, "rollout", "wt_rollout")
    try:
        assert ray_cluster.get(rollout_group.workers[0].__ray_call__.remote(lambda w: w.actor_module is None))
        assert rollout_group.rollout_policy_version() == [0]
        actor_group.update_actor(ppo_batch(batch_size=4))
        stale = rollout_group.generate_sequences(prompts)

        package = first_package(actor_group.publish_weights(1))
        receive_refs = rollout_group.receive_weights(package)  # non-blocking: refs come back at once
        pushed = rollout_group.generate_sequences(prompts)  # submitted after the push: runs after it
        (metrics,) = ray_cluster.get(receive_refs)
        del package
        hybrid = actor_group.generate_sequences(prompts)  # the hybrid engine syncs from the updated actor

        assert torch.equal(pushed.batch["responses"], hybrid.batch["responses"])
        assert torch.equal(pushed.batch["rollout_log_probs"], hybrid.batch["rollout_log_probs"])
        assert not torch.equal(stale.batch["rollout_log_probs"], hybrid.batch["rollout_log_probs"])
        assert rollout_group.rollout_policy_version() == [1]
        # the hybrid engine counts the actor's fp32 bytes, the package the bf16 bytes sent: half as many,
        # in one 1 MB bucket (the tiny model is 0.27 MB in bf16)
        (hybrid_mb,) = hybrid.meta_info["metrics"]["rollout/weight_sync_mb"]
        assert metrics["rollout/weight_sync_mb"] == pytest.approx(hybrid_mb / 2)
        assert metrics["rollout/weight_sync_buckets"] == 1.0 and metrics["rollout/weight_sync_version"] == 1.0
        assert metrics["rollout/weight_sync_verified_tensors"] >= 2
        assert 0.0 <= metrics["rollout/weight_transfer_s"] <= metrics["rollout/weight_sync_s"]
    finally:
        for pool, group in ((actor_pool, actor_group), (rollout_pool, rollout_group)):
            group.kill()
            pool.release()


def test_two_fsdp_ranks_publish_one_package_of_the_full_weights(ray_cluster, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from hybridrl.workers.sharding_manager.weight_transfer import first_package, unpack_bucket

    config = policy_config(tiny_model_dir, "actor_rollout_ref.actor.ppo_mini_batch_size=8", "data.train_batch_size=8")
    pool, group = worker_group(ray_cluster, config, "actor", "wt_actor2", world_size=2)
    try:
        results = group.publish_weights(7)  # collective: both ranks gather every sharded tensor
        assert results[1] is None
        package = first_package(results)
        received = dict(kv for ref in package.bucket_refs for kv in unpack_bucket(ray_cluster.get(ref)))
    finally:
        group.kill()
        pool.release()
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    assert package.version == 7 and sorted(received) == sorted(reference)
    for name, tensor in reference.items():  # each rank held half of every tensor; the package holds them whole
        assert torch.equal(received[name], tensor.to(torch.bfloat16)), name
