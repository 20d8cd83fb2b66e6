"""The async trainer modes end to end on CPU: real Ray, real FSDP2 workers over gloo, hf rollout, tiny model."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.trainer.e2e import deterministic_part, failure_report, grpo_args, read_metrics, run_main_ppo

pytestmark = pytest.mark.slow

ASYNC_METRICS = [
    "training/off_policy/trajectory_staleness/mean", "training/off_policy/evicted_samples",
    "async/dropped_batches", "async/buffer_size", "async/trainer_idle_s", "async/trainer_version",
    "async/rollout_version",
]


def _four_steps(model_dir: str, data_dir: str, ckpt: str, **overrides: object) -> list[str]:
    """2 epochs × 2 steps (16 prompts, 8 per step), save and validate at step 2 and 4, calculate_log_probs on."""
    return grpo_args(model_dir, data_dir, ckpt, **{
        "trainer.total_epochs": 2, "trainer.total_training_steps": "null",
        "actor_rollout_ref.rollout.calculate_log_probs": True, **overrides})


def test_colocate_async_one_step_off_and_exact_resume(tiny_model_dir, arithmetic_data_dir, tmp_path):
    """colocate_async, 4 steps, barriers (save + validation) at 2 and 4.

    Staleness by hand: step 1 trains the batch made before any update (0); step 2 the batch enqueued before
    update 1, i.e. by version 0, trained at version 1 (1); step 2 is a barrier, so step 3's batch is generated
    after update 2 (0) and step 4's before update 3 (1). Then a run resumed from the step-2 checkpoint repeats
    steps 3-4 exactly."""
    full_ckpt, full_metrics = str(tmp_path / "full"), str(tmp_path / "full.jsonl")
    args = _four_steps(tiny_model_dir, arithmetic_data_dir, full_ckpt, **{"trainer.v1.trainer_mode": "colocate_async"})
    proc = run_main_ppo(args, full_metrics)
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(full_metrics)
    assert max(metrics) == 4
    for name in ASYNC_METRICS:
        assert name in metrics[4], name
    staleness = [metrics[s]["training/off_policy/trajectory_staleness/mean"] for s in (1, 2, 3, 4)]
    assert staleness == [0.0, 1.0, 0.0, 1.0]
    assert metrics[4]["training/off_policy_versions/staleness_0"] == 2
    assert metrics[4]["training/off_policy_versions/staleness_1"] == 2
    assert [metrics[s]["async/buffer_size"] for s in (1, 2, 3, 4)] == [1, 0, 1, 0]  # nothing crosses a barrier
    assert metrics[4]["async/trainer_version"] == 4
    assert "rollout_corr/kl" in metrics[2] or any(k.startswith("rollout_corr/") for k in metrics[2])

    resumed_ckpt, resumed_metrics = str(tmp_path / "resumed"), str(tmp_path / "resumed.jsonl")
    os.makedirs(resumed_ckpt)
    shutil.copytree(os.path.join(full_ckpt, "global_step_2"), os.path.join(resumed_ckpt, "global_step_2"))
    with open(os.path.join(resumed_ckpt, "latest_checkpointed_iteration.txt"), "w") as tracker:
        tracker.write("2")
    args = _four_steps(tiny_model_dir, arithmetic_data_dir, resumed_ckpt,
                       **{"trainer.v1.trainer_mode": "colocate_async", "trainer.val_before_train": False})
    proc = run_main_ppo(args, resumed_metrics)
    assert proc.returncode == 0, failure_report(proc)
    resumed = read_metrics(resumed_metrics)
    assert min(resumed) == 3
    for step in (3, 4):
        assert _comparable(resumed[step]) == _comparable(metrics[step]), step


def _comparable(metrics: dict[str, float]) -> dict[str, float]:
    """The deterministic part, less wall-clock async figures (idle times)."""
    return {k: v for k, v in deterministic_part(metrics).items() if not k.endswith("_idle_s")}
