"""The reference-only Megatron worker (``role="ref"``), 2 gloo ranks, against the HF model's log-probs (fp32,
tolerance 1e-5; no actor, optimizer or rollout built).

- alone in its processes it uses its own ``ref.megatron`` layout: TP=2 while the actor's section says TP=1;
- next to an actor's worker in the same processes (the trainer's ``RefPolicy`` on the actor's pool) it runs on the
  grid the actor made, as in verl 0.5: actor TP=2, ``ref.megatron`` left at TP=1.
"""

from __future__ import annotations

import pytest
import torch
from megatron_testlib import hf_response_log_probs, policy_batch, policy_config, run_ranks

LOG_PROB_TOLERANCE = 1e-5


def _ref_log_probs(rank: int, model_dir: str, colocated: bool) -> dict:
    from megatron.core import parallel_state

    from hybridrl.workers.megatron.worker import MegatronActorRolloutRefWorker

    if colocated:
        config = policy_config(model_dir, 2)
        MegatronActorRolloutRefWorker(config, role="actor")  # makes the process's megatron-core grid (TP=2)
    else:
        config = policy_config(model_dir, 1, "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=2")
    worker = MegatronActorRolloutRefWorker(config, role="ref")
    worker.init_model()
    log_probs = worker.compute_ref_log_prob(policy_batch(seed=1)).batch["ref_log_prob"]
    return {"ref": log_probs, "tp_size": parallel_state.get_tensor_model_parallel_world_size(),
            "has_actor": float(getattr(worker, "actor_optimizer", None) is not None or worker.rollout is not None)}


@pytest.mark.parametrize("colocated", [False, True], ids=["own_layout", "next_to_actor"])
def test_ref_only_worker_tp2_equals_hf(tmp_path, tiny_gqa_qwen2_dir, colocated):
    ranks = run_ranks(_ref_log_probs, 2, tmp_path / "ref", tiny_gqa_qwen2_dir, colocated)
    data = policy_batch(seed=1)
    mask = data.batch["response_mask"].bool()
    expected = hf_response_log_probs(tiny_gqa_qwen2_dir, data)
    for result in ranks:
        assert result["tp_size"] == 2 and result["has_actor"] == 0.0
        diff = (result["ref"] - expected)[mask].abs().max().item()
        print(f"ref-only worker (TP=2, colocated={colocated}) log-prob diff vs HF: {diff:.2e}")
        assert diff < LOG_PROB_TOLERANCE
    torch.testing.assert_close(ranks[1]["ref"], ranks[0]["ref"], rtol=0, atol=0)
