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
    deterministic_part,
    failure_report,
    grpo_args,
    ppo_overrides,
    read_metrics,
    run_main_ppo,
)

pytestmark = pytest.mark.slow

VERL_METRICS = [
    "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm", "actor/lr", "actor/entropy",
    "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean", "critic/returns/mean",
    "response_length/mean", "response_length/clip_ratio", "prompt_length/mean",
    "timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor", "timing_s/step",
    "timing_per_token_ms/gen", "perf/throughput", "perf/total_num_tokens", "perf/time_per_step",
    "global_seqlen/mean", "training/global_step", "training/epoch",
]


def _assert_checkpoint(ckpt: str, step: int, world_size: int = 2, roles=("actor",)) -> None:
    assert open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")).read().strip() == str(step)
    folder = os.path.join(ckpt, f"global_step_{step}")
    assert os.path.exists(os.path.join(folder, "data.json")) and os.path.exists(os.path.join(folder, "data.safetensors"))
    assert not os.path.exists(os.path.join(folder, "data.pt"))  # no pickle written
    for role in roles:
        files = set(os.listdir(os.path.join(folder, role)))
        for rank in range(world_size):
            for kind in ("model", "optim", "extra_state"):
                assert f"{kind}_world_size_{world_size}_rank_{rank}.pt" in files, files
        assert "fsdp_config.json" in files and "huggingface" in files


def test_grpo_end_to_end(tiny_model_dir, arithmetic_data_dir, tmp_path):
    # the actor and reference run each distinct prompt once (share_prompt_prefix; the quickstart's setting)
    shared = {"actor_rollout_ref.model.share_prompt_prefix": True}
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    proc = run_main_ppo(grpo_args(tiny_model_dir, arithmetic_data_dir, ckpt, **shared), metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    assert "Batch plan" in proc.stdout and "[main_ppo] finished; final validation metrics" in proc.stdout
    metrics = read_metrics(metrics_file)
    assert sorted(metrics) == [0, 1, 2]  # step 0 = validation before training
    assert "val-core/arithmetic/reward/mean@1" in metrics[0]
    for name in VERL_METRICS + ["actor/kl_loss", "actor/kl_coef", "val-core/arithmetic/reward/mean@1"]:
        assert name in metrics[2], name
    assert metrics[2]["training/global_step"] == 2
    assert metrics[1]["perf/total_num_tokens"] > 0 and metrics[1]["actor/grad_norm"] > 0
    assert "critic/vf_loss" not in metrics[2]  # GRPO has no critic
    _assert_checkpoint(ckpt, 2)


def test_ppo_end_to_end(tiny_model_dir, arithmetic_data_dir, tmp_path):
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    args = grpo_args(tiny_model_dir, arithmetic_data_dir, ckpt, **ppo_overrides(tiny_model_dir))
    proc = run_main_ppo(args, metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(metrics_file)
    for name in VERL_METRICS + ["critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm",
                                "critic/values/mean", "critic/vf_explained_var", "actor/reward_kl_penalty",
                                "actor/reward_kl_penalty_coeff", "timing_s/values", "timing_s/update_critic",
                                "timing_s/ref"]:
        assert name in metrics[2], name
    _assert_checkpoint(ckpt, 2, roles=("actor", "critic"))


def test_ppo_split_placement_critic_pool_with_sequence_parallelism(tiny_model_dir, arithmetic_data_dir, tmp_path):
    """Split placement from the config alone: actor+rollout on global_pool (1 rank), the critic on critic_pool
    (2 ranks forming one Ulysses SP group over packed sequences)."""
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
    _assert_checkpoint(ckpt, 2, world_size=1, roles=("actor",))
    _assert_checkpoint(ckpt, 2, world_size=2, roles=("critic",))


def test_exact_resume_after_sigterm_at_epoch_boundary(tiny_model_dir, arithmetic_data_dir, tmp_path):
    """4 steps over 2 epochs (2 steps each). Stop after the step-2 checkpoint (an epoch boundary) with SIGTERM,
    resume, and compare steps 3–4 with an uninterrupted run: identical except timing/perf."""
    reward = {"custom_reward_function.path": str(ASSETS / "blocking_reward.py"),
              "trainer.total_epochs": 2, "trainer.total_training_steps": "null", "trainer.test_freq": 4}
    full_ckpt, full_metrics = str(tmp_path / "full"), str(tmp_path / "full.jsonl")
    proc = run_main_ppo(grpo_args(tiny_model_dir, arithmetic_data_dir, full_ckpt, **reward), full_metrics)
    assert proc.returncode == 0, failure_report(proc)
    uninterrupted = read_metrics(full_metrics)
    assert max(uninterrupted) == 4

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
