"""The Megatron critic worker against the FSDP2 one on the same tiny HF model (2 gloo ranks for TP=2).

The TP=2 critic scores and trains on packed rows (``critic.model.use_remove_padding=True``, block-diagonal
attention), the others on padded rows. Both start from the same weights: the HF trunk and the value head HF initialises when it loads the folder as a
token-classification model (the folder has no ``score``), so values agree from the start.

Sequence on each: values of a batch → one critic update (1 mini-batch of 4, 2 micro-batches, Adam lr 1e-3, clip
1.0, weight decay 0: megatron-core exempts biases and norms from it, FSDP's AdamW does not; old values offset so
that value clipping bites) → values of a probe batch. Tolerances (fp32): values 1e-5 before and after the update,
the update's metrics 1e-5 relative.
"""

from __future__ import annotations

import pytest
import torch
from megatron_testlib import critic_config, critic_update_batch, policy_batch, run_fsdp2_tp1_tp2

VALUE_TOLERANCE = 1e-5
UPDATED_VALUE_TOLERANCE = 1e-5
_METRICS = ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr")


def _values_update_probe(rank: int, model_dir: str, tp_size: int, strategy: str) -> dict:
    from omegaconf import OmegaConf

    from hybridrl.workers.critic_worker import CriticWorker
    from hybridrl.workers.megatron.critic_worker import MegatronCriticWorker

    worker_class = MegatronCriticWorker if strategy == "megatron" else CriticWorker
    packed = ["critic.model.use_remove_padding=True"] if tp_size == 2 else []  # TP=2 also runs the packed rows
    worker = worker_class(critic_config(model_dir, tp_size, strategy, *packed))
    worker.init_model()
    data = policy_batch(seed=1)
    before = worker.compute_values(data).batch["values"]
    probe_before = worker.compute_values(policy_batch(seed=2)).batch["values"]
    metrics = worker.update_critic(critic_update_batch(data, before)).meta_info["metrics"]
    after = worker.compute_values(policy_batch(seed=2)).batch["values"]
    if strategy == "megatron":  # one megatron-core grid per process: a colocated worker asking for another is refused
        from hybridrl.workers.megatron.parallel import init_megatron_parallel

        other = dict(worker.config.megatron, tensor_model_parallel_size=3 - tp_size)
        with pytest.raises(ValueError, match="already holds a megatron-core grid"):
            init_megatron_parallel(OmegaConf.create(other), "cpu")
        dispatch = {"dp_rank": worker._query_dispatch_info("critic"), "collect": worker._query_collect_info("critic")}
    else:
        dispatch = {"dp_rank": 0, "collect": True}
    return {"before": before, "probe_before": probe_before, "after": after,
            "skipped": float(metrics["critic/skipped_steps"]), **dispatch,
            **{key: float(torch.tensor(metrics[key], dtype=torch.float64).mean()) for key in _METRICS}}


def test_megatron_critic_tp2_and_tp1_equal_fsdp2(tmp_path, tiny_gqa_qwen2_dir):
    fsdp, tp1, tp2 = run_fsdp2_tp1_tp2(_values_update_probe, tmp_path, tiny_gqa_qwen2_dir)
    mask = policy_batch(seed=1).batch["response_mask"].bool()
    probe_mask = policy_batch(seed=2).batch["response_mask"].bool()
    assert fsdp["before"][mask].abs().max() > 0.01  # the head is not zero: the comparison means something
    assert (fsdp["before"][~mask] == 0).all()  # no values outside the response
    for megatron in (tp1, *tp2):
        diff_before = (megatron["before"] - fsdp["before"])[mask].abs().max().item()
        diff_after = (megatron["after"] - fsdp["after"])[probe_mask].abs().max().item()
        print(f"value diff vs FSDP2: before {diff_before:.2e}, after one update {diff_after:.2e}")
        assert diff_before < VALUE_TOLERANCE
        assert diff_after < UPDATED_VALUE_TOLERANCE
        assert (megatron["before"][~mask] == 0).all()
        for key in _METRICS:
            assert abs(megatron[key] - fsdp[key]) <= 1e-5 * max(1.0, abs(fsdp[key])), (key, megatron[key], fsdp[key])
        assert megatron["skipped"] == 0
    assert fsdp["critic/grad_norm"] > 0 and fsdp["critic/vf_clipfrac"] > 0 and fsdp["critic/lr"] == 1e-3
    assert (fsdp["after"] - fsdp["probe_before"])[probe_mask].abs().max() > 1e-3  # the update moved the values
    torch.testing.assert_close(tp2[1]["after"], tp2[0]["after"], rtol=0, atol=0)  # the TP ranks agree
    # verl's Megatron dispatch on the mesh "critic": one DP rank, the driver keeps TP rank 0's output
    assert [(rank["dp_rank"], rank["collect"]) for rank in (tp1, *tp2)] == [(0, True), (0, True), (0, False)]
