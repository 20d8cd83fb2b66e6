"""``python -m hybridrl.trainer.main_ppo`` end to end on CPU: real Ray, 2 FSDP2 workers over gloo, hf rollout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.trainer.e2e import (
    ASSETS,
    VERL_METRICS,
    assert_checkpoint,
    deterministic_part,
    failure_report,
    grpo_args,
    ppo_overrides,
    read_metrics,
    run_main_ppo,
)

pytestmark = pytest.mark.slow

def test_ppo_split_placement_critic_pool_with_sequence_parallelism(tiny_model_dir, arithmetic_data_dir, tmp_path):
    """Split placement from the config alone: actor+rollout on global_pool (1 rank), the critic on critic_pool
    (2 ranks forming one Ulysses SP group over packed sequences). Rewards come from the reward loop."""
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    split = {
        **ppo_overrides(tiny_model_dir),
        "trainer.n_gpus_per_node": 1,
        "trainer.test_freq": -1,
        "critic.enable_resource_pool": True,
        "critic.n_gpus_per_node": 2,
        "critic.nnodes": 1,
        "critic.model.use_remove_padding": True,
        "critic.ulysses_sequence_parallel_size": 2,
        # the reward loop rides on this run: one reward worker (a Ray actor), the rate-limited manager
        "reward.reward_manager.name": "limit",
        "reward.num_workers": 1,
        "+reward.max_concurrent": 4,
    }
    proc = run_main_ppo(grpo_args(tiny_model_dir, arithmetic_data_dir, ckpt, **split), metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    pool_lines = [line for line in proc.stdout.splitlines() if "_pool:" in line]
    assert any("[trainer] global_pool: actor_rollout, ref on 1 rank(s)" in line for line in pool_lines), pool_lines
    assert any("[trainer] critic_pool: critic on 2 rank(s)" in line for line in pool_lines), pool_lines
    metrics = read_metrics(metrics_file)
    for name in ("critic/vf_loss", "critic/grad_norm", "critic/values/mean", "actor/pg_loss"):
        assert name in metrics[2], name
    assert metrics[1]["critic/grad_norm"] > 0
    assert metrics[2]["reward/judge_errors"] == 0 and metrics[2]["reward/judge_timeouts"] == 0  # the reward loop
    assert_checkpoint(ckpt, 2, world_size=1, roles=("actor",))
    assert_checkpoint(ckpt, 2, world_size=2, roles=("critic",))


def test_exact_resume_after_sigterm_at_epoch_boundary(tiny_model_dir, arithmetic_data_dir, tmp_path):
    """GRPO end to end, then exact resume. The uninterrupted run: 4 steps over 2 epochs (2 steps each), verl's
    metric names, checkpoints, validation before training and at the end. Then a second run stops after the step-2
    checkpoint (an epoch boundary) with SIGTERM, resumes, and its steps 3–4 equal the uninterrupted run's except
    timing/perf."""
    reward = {"custom_reward_function.path": str(ASSETS / "blocking_reward.py"),
              # the actor and reference run each distinct prompt once (share_prompt_prefix; the quickstart's setting)
              "actor_rollout_ref.model.share_prompt_prefix": True,
              "trainer.total_epochs": 2, "trainer.total_training_steps": "null", "trainer.test_freq": 4}
    full_ckpt, full_metrics = str(tmp_path / "full"), str(tmp_path / "full.jsonl")
    proc = run_main_ppo(grpo_args(tiny_model_dir, arithmetic_data_dir, full_ckpt, **reward), full_metrics)
    assert proc.returncode == 0, failure_report(proc)
    assert "Batch plan" in proc.stdout and "[main_ppo] finished; final validation metrics" in proc.stdout
    uninterrupted = read_metrics(full_metrics)
    assert sorted(uninterrupted) == [0, 1, 2, 3, 4]  # step 0 = validation before training
    assert "val-core/arithmetic/reward/mean@1" in uninterrupted[0]
    for name in VERL_METRICS + ["actor/kl_loss", "actor/kl_coef", "val-core/arithmetic/reward/mean@1"]:
        assert name in uninterrupted[4], name
    assert uninterrupted[4]["training/global_step"] == 4
    assert uninterrupted[1]["perf/total_num_tokens"] > 0 and uninterrupted[1]["actor/grad_norm"] > 0
    assert "critic/vf_loss" not in uninterrupted[4]  # GRPO has no critic
    assert_checkpoint(full_ckpt, 4)

    ckpt, metrics_file = str(tmp_path / "resumed"), str(tmp_path / "resumed.jsonl")
    args = grpo_args(tiny_model_dir, arithmetic_data_dir, ckpt, **reward)
    tracker = os.path.join(ckpt, "latest_checkpointed_iteration.txt")
    _run_until_checkpoint_then_sigterm(args, metrics_file, tracker)
    assert open(tracker).read().strip() == "2"

    proc = run_main_ppo(args, metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    assert "resuming from" in proc.stdout + proc.stderr
    resumed = read_metrics(metrics_file)
    for step in (3, 4):
        assert deterministic_part(resumed[step]) == deterministic_part(uninterrupted[step]), step
    assert resumed[3]["training/epoch"] == 1  # the second epoch, not a zero-step one

    proc = run_main_ppo(args, metrics_file)  # the run is finished: says so, exits cleanly
    assert proc.returncode == 0, failure_report(proc)
    assert "run already finished" in proc.stdout + proc.stderr


def _run_until_checkpoint_then_sigterm(args: list[str], metrics_file: str, tracker: str) -> None:
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": metrics_file,
           "HYBRIDRL_TEST_BLOCK_WHEN_EXISTS": tracker}
    proc = subprocess.Popen([sys.executable, "-m", "hybridrl.trainer.main_ppo", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not os.path.exists(tracker) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, f"run ended before its step-2 checkpoint:\n{proc.stdout.read()[-4000:]}"
    time.sleep(1.0)  # step 3 is now blocked in its reward function
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0, output[-3000:]
    assert "interrupted" in output, output[-3000:]


def test_bad_inputs_fail_before_any_worker_starts(tiny_model_dir, arithmetic_data_dir, tmp_path):
    metrics_file = str(tmp_path / "m.jsonl")
    base = grpo_args(tiny_model_dir, arithmetic_data_dir, str(tmp_path / "ckpt"))
    cases = {
        "data.train_files": ["data.train_files=/nonexistent/train.parquet"],
        "trainer.total_epochs": ["trainer.totl_epochs=3"],
        "data.train_batch_size": ["data.train_batch_size=3", "actor_rollout_ref.rollout.n=1"],  # 3 prompts, 2 ranks
    }
    for key, extra in cases.items():
        proc = run_main_ppo(base + extra, metrics_file, timeout=120)
        output = proc.stdout + proc.stderr
        assert proc.returncode != 0, key
        assert key in output, (key, output[-2000:])
        assert "Started a local Ray instance" not in output, key
