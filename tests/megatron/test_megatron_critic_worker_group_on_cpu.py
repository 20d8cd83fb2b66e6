"""The Megatron critic behind a Ray worker group: 2 workers at TP=1 are 2 data-parallel ranks (mesh ``"critic"``).

The driver splits the batch over the DP ranks and concatenates their outputs (verl 0.5's Megatron dispatch), so
``compute_values`` on 4 rows returns 4 rows, equal to the HF token-classification model's values (the head HF
initialises, as the FSDP critic loads it; fp32, < 1e-5). After one ``update_critic`` (megatron-core DDP averages
the gradients over DP, the distributed optimizer of ``critic.megatron.use_distributed_optimizer=True`` shards its
state) both ranks hold the same weights: two copies of the same rows, one on each rank, get the same values.
"""

from __future__ import annotations

import pytest
import torch
from megatron_testlib import policy_batch

pytestmark = pytest.mark.slow


def _hf_values(model_dir: str, data) -> torch.Tensor:
    """Values ``[B, R]`` of the HF token-classification model the FSDP critic would load (padded layout)."""
    from hybridrl.workers.engine.model_loader import load_hf_model

    model, _ = load_hf_model(model_dir, kind="token_classification", attn_implementation="eager")
    batch = data.batch
    response_len = batch["responses"].shape[1]
    with torch.no_grad():
        logits = model.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              position_ids=batch["position_ids"]).logits
    return logits[:, -response_len - 1 : -1, 0] * batch["response_mask"]


def test_critic_worker_group_splits_over_dp_ranks(ray_cluster, tiny_gqa_qwen2_dir):
    from config_testlib import compose_config

    from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from hybridrl.workers.megatron.critic_worker import MegatronCriticWorker

    config = compose_config("ppo_megatron_trainer", [
        f"actor_rollout_ref.model.path={tiny_gqa_qwen2_dir}", f"critic.model.path={tiny_gqa_qwen2_dir}",
        "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "critic.ppo_micro_batch_size_per_gpu=2", "critic.optim.lr=1e-3"]).critic
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1, name_prefix="megatron_critic_dp2")
    worker_class = RayClassWithInitArgs(ray_cluster.remote(MegatronCriticWorker), config=config)
    group = RayWorkerGroup(pool, worker_class, device_name="cpu", worker_env={"HYBRIDRL_DEVICE": "cpu"})
    try:
        group.init_model()
        data = policy_batch(seed=1)
        values = group.compute_values(data).batch["values"]
        assert values.shape == (4, 5)  # 2 rows per DP rank, concatenated in order
        assert (values - _hf_values(tiny_gqa_qwen2_dir, data)).abs().max().item() < 1e-5
        data.batch["values"] = values
        data.batch["returns"] = torch.randn(values.shape, generator=torch.Generator().manual_seed(3))
        data.batch["returns"] *= data.batch["response_mask"]
        metrics = group.update_critic(data).meta_info["metrics"]
        grad_norms = metrics["critic/grad_norm"]  # one entry per DP rank (each collected), one mini-batch each
        assert len(grad_norms) == 2 and grad_norms[0] == grad_norms[1] and grad_norms[0][0] > 0  # a global norm
        twice = policy_batch(seed=1).select_idxs([0, 1, 0, 1])  # rows 0-1 to DP rank 0, their copies to DP rank 1
        after = group.compute_values(twice).batch["values"]
        torch.testing.assert_close(after[2:], after[:2], rtol=0, atol=1e-6)
        assert (after[:2] - values[:2]).abs().max() > 1e-3  # the update moved the values
    finally:
        group.kill()
        pool.release()
