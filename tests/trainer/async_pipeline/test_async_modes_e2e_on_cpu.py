"""The async trainer modes end to end on CPU: real Ray, real FSDP2 workers over gloo, hf rollout, tiny model.

Both modes run with the agent loop (``rollout.mode=async``), the only rollout verl 0.9 drives them with (its sync
rollout mode is deprecated); the schedules themselves (staleness, drops, pushes) are unit-tested for every setting in
``test_schedule_on_cpu.py``. One run per mode carries all the checks: 4 steps with barriers at 2 and 4."""

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

# the AgentLoopManager serves generation (its generate blocks: it runs on a driver thread)
AGENT_LOOP = {"actor_rollout_ref.rollout.mode": "async", "actor_rollout_ref.rollout.agent.num_workers": 1,
              "data.return_raw_chat": True}


def _four_steps(model_dir: str, data_dir: str, ckpt: str, **overrides: object) -> list[str]:
    """2 epochs × 2 steps (16 prompts, 8 per step), save and validate at step 2 and 4, calculate_log_probs on,
    generation by the agent loop."""
    return grpo_args(model_dir, data_dir, ckpt, **{
        "trainer.total_epochs": 2, "trainer.total_training_steps": "null",
        "actor_rollout_ref.rollout.calculate_log_probs": True, **AGENT_LOOP, **overrides})


def test_colocate_async_one_step_off_and_exact_resume(tiny_model_dir, arithmetic_data_dir, tmp_path):
    """colocate_async with the agent loop, 4 steps, barriers (save + validation) at 2 and 4.

    Staleness by hand: step 1 trains the batch made before any update (0); step 2 the batch enqueued before
    update 1, i.e. by version 0, trained at version 1 (1); step 2 is a barrier, so step 3's batch is generated
    after update 2 (0) and step 4's before update 3 (1). The rollout's log-probs come with every batch. Then a run
    resumed from the step-2 checkpoint repeats steps 3-4 exactly."""
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
    assert all("training/rollout_probs_diff_mean" in metrics[s] for s in (1, 2, 3, 4))

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
    for run in (metrics, resumed):  # step 3 is on-policy: the engine's log-probs are the trainer's up to float noise
        assert run[3]["training/rollout_probs_diff_max"] < 1e-5 and abs(run[3]["rollout_corr/kl"]) < 1e-5, run[3]


# The engine-vs-trainer comparisons are float noise (~1e-9) whose last bits depend on how the engine's server
# batched the agent loop's requests, which differs between two runs; they are bounded instead of compared.
ENGINE_NOISE = ("training/rollout_probs_diff_", "rollout_corr/")


def _comparable(metrics: dict[str, float]) -> dict[str, float]:
    """The deterministic part, less wall-clock figures (idle times), the run counters that start again at a resume
    (the staleness histogram and the dropped-batch count count since the process started) and the engine noise."""
    counters = ("training/off_policy_versions/", "async/dropped_batches", *ENGINE_NOISE)
    return {k: v for k, v in deterministic_part(metrics).items()
            if not k.endswith("_idle_s") and not k.startswith(counters)}


def test_separate_async_rollout_pool_pushes_and_drops(tiny_model_dir, arithmetic_data_dir, tmp_path):
    """separate_async with the agent loop serving from the rollout's own 1-process pool (its generations and the
    weight loads run in order on one driver thread); the actor on 1 process; pushes every 2 updates, threshold 1,
    drop. By hand (tests/trainer/async_pipeline/test_schedule_on_cpu.py, drop case): step 3 drops the batch made
    by version 0 and trains one made after push 2, so staleness is 0, 1, 0, 1 with one batch dropped; the last step
    is a barrier (validation, served by the rollout's pool), where the rollout gets version 4. Steps 1 and 3 train
    batches of the weights the trainer holds, so the rollout's and the trainer's probabilities agree there and
    differ more at the 1-stale steps 2 and 4 (hf engine, float32)."""
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    args = _four_steps(tiny_model_dir, arithmetic_data_dir, ckpt, **{
        "trainer.v1.trainer_mode": "separate_async", "trainer.v1.separate_async.parameter_sync_step": 2,
        "trainer.v1.sampler.max_off_policy_threshold": 1, "trainer.total_training_steps": 4,
        "trainer.test_freq": 4, "trainer.save_freq": 4, "trainer.n_gpus_per_node": 1,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 16,
        "actor_rollout_ref.rollout.nnodes": 1, "actor_rollout_ref.rollout.n_gpus_per_node": 1,
        # rewards stream from the agent loop to one reward-loop worker (the rate-limited manager)
        "reward.reward_manager.name": "limit", "reward.num_workers": 1})
    proc = run_main_ppo(args, metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    assert "[trainer] rollout_pool: rollout on 1 rank(s)" in proc.stdout + proc.stderr
    assert "[reward_loop] rewards stream from the agent loop" in proc.stdout + proc.stderr
    metrics = read_metrics(metrics_file)
    staleness = [metrics[s]["training/off_policy/trajectory_staleness/max"] for s in (1, 2, 3, 4)]
    assert staleness == [0.0, 1.0, 0.0, 1.0]
    assert max(staleness) <= 1  # never over trainer.v1.sampler.max_off_policy_threshold
    assert [metrics[s]["async/dropped_batches"] for s in (1, 2, 3, 4)] == [0, 0, 1, 1]
    assert metrics[3]["training/off_policy/evicted_samples"] == 8
    assert metrics[4]["async/rollout_version"] == 4
    pushes = sum(metrics[s].get("rollout/weight_pushes", 0.0) for s in metrics)
    assert pushes == 2  # after update 2 and at the barrier after update 4
    assert metrics[4]["rollout/weight_sync_mb"] > 0
    assert metrics[2]["async/rollout_idle_s"] >= 0
    assert metrics[4]["actor/pg_loss"] == metrics[4]["actor/pg_loss"]  # trained (not NaN)
    assert any(key.startswith("val-core/") for key in metrics[4])  # validation served by the rollout's pool
    assert all(metrics[s]["reward/judge_errors"] == 0 for s in (1, 2, 3, 4))  # scored by the reward loop
    diff = {s: metrics[s]["training/rollout_probs_diff_max"] for s in (1, 2, 3, 4)}
    assert diff[1] < 0.05 and diff[3] < 0.05, diff  # on-policy: the engine holds the trainer's weights
    assert diff[1] < diff[2] and diff[3] < diff[4], diff  # the 1-stale steps see older weights
