"""Helpers for CLI end-to-end tests: build the command line, run it, read the JSONL metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ASSETS = Path(__file__).parent / "assets"


def cpu_run_args(model_dir: str, data_dir: str, ckpt_dir: str) -> dict[str, object]:
    """The settings every small CLI run shares: 8 prompts × n=4 per step on 2 CPU workers, hf rollout,
    8-token responses, 2 steps, console + file loggers."""
    return {
        "data.train_files": f"{data_dir}/train.parquet",
        "data.val_files": f"{data_dir}/test.parquet",
        "data.train_batch_size": 8,
        "data.max_prompt_length": 64,
        "data.max_response_length": 8,
        "data.dataloader_num_workers": 0,
        "actor_rollout_ref.model.path": model_dir,
        "actor_rollout_ref.model.enable_gradient_checkpointing": False,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 8,
        "actor_rollout_ref.actor.optim.lr": 1e-3,
        "actor_rollout_ref.rollout.name": "hf",
        # the batch generate path without rollout log-probs, padded forwards, sampling seed 0 (verl 0.5's defaults,
        # which these runs were written against; verl 0.9 defaults to async, log-probs on, remove padding on, seed 42)
        "actor_rollout_ref.rollout.mode": "sync",
        "actor_rollout_ref.rollout.calculate_log_probs": False,
        "actor_rollout_ref.rollout.seed": 0,
        "actor_rollout_ref.model.use_remove_padding": False,
        "critic.model.use_remove_padding": False,
        "actor_rollout_ref.rollout.n": 4,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.rollout.dtype": "float32",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 16,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 16,
        "trainer.device": "cpu",
        "trainer.n_gpus_per_node": 2,
        "trainer.nnodes": 1,
        "trainer.total_epochs": 1,
        "trainer.total_training_steps": 2,
        "trainer.logger": "[console,file]",
        "trainer.default_local_dir": ckpt_dir,
        "trainer.project_name": "e2e",
        "trainer.experiment_name": "run",
    }


VERL_METRICS = [
    "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm", "actor/lr", "actor/entropy",
    "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean", "critic/returns/mean",
    "response_length/mean", "response_length/clip_ratio", "prompt_length/mean",
    "timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor", "timing_s/step",
    "timing_per_token_ms/gen", "perf/throughput", "perf/total_num_tokens", "perf/time_per_step",
    "global_seqlen/mean", "training/global_step", "training/epoch",
]


def assert_checkpoint(ckpt: str, step: int, world_size: int = 2, roles=("actor",)) -> None:
    """verl's checkpoint layout at ``ckpt/global_step_{step}``: per-rank model/optim/extra_state files of each role,
    the dataloader state as JSON + safetensors (no pickle), the tracker file naming ``step``."""
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


def as_overrides(args: dict[str, object], overrides: dict[str, object]) -> list[str]:
    """``key=value`` Hydra overrides of ``args`` updated with ``overrides``."""
    return [f"{key}={value}" for key, value in {**args, **overrides}.items()]


def grpo_args(model_dir: str, data_dir: str, ckpt_dir: str, **overrides: object) -> list[str]:
    """A small GRPO run on 2 CPU workers: 8 prompts × n=4 per step."""
    args = {
        "algorithm.adv_estimator": "grpo",
        **cpu_run_args(model_dir, data_dir, ckpt_dir),
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
        "actor_rollout_ref.actor.use_kl_loss": True,
        "trainer.test_freq": 2,
        "trainer.save_freq": 2,
    }
    return as_overrides(args, overrides)


def ppo_overrides(model_dir: str) -> dict[str, object]:
    """Switch :func:`grpo_args` to PPO: GAE with a critic, KL in the reward, one sample per prompt."""
    return {
        "algorithm.adv_estimator": "gae",
        "algorithm.use_kl_in_reward": True,
        "actor_rollout_ref.actor.use_kl_loss": False,
        "actor_rollout_ref.rollout.n": 1,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        "critic.model.path": model_dir,
        "critic.model.enable_gradient_checkpointing": False,
        "critic.ppo_micro_batch_size_per_gpu": 2,
        "critic.optim.lr": 1e-3,
    }


def run_module(module: str, args: list[str], metrics_file: str, timeout: float = 400,
               extra_env: dict | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    """``python -m <module> args`` with the ``file`` logger writing ``metrics_file``."""
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": metrics_file,
           "HF_HUB_OFFLINE": "1", "RAY_DEDUP_LOGS": "0", **(extra_env or {})}
    return subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def run_main_ppo(args: list[str], metrics_file: str, timeout: float = 400, extra_env: dict | None = None,
                 cwd: str | None = None) -> subprocess.CompletedProcess:
    return run_module("hybridrl.trainer.main_ppo", args, metrics_file, timeout, extra_env, cwd)


def read_metrics(path: str) -> dict[int, dict[str, float]]:
    """Step → metrics, from the ``file`` logger's JSONL (later lines for the same step are merged)."""
    steps: dict[int, dict[str, float]] = {}
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        steps.setdefault(row["step"], {}).update(row["data"])
    return steps


def deterministic_part(metrics: dict[str, float]) -> dict[str, float]:
    """Drop what legitimately differs between runs: wall-clock timings, throughput, memory, and the weight-sync
    counters (a resumed run syncs during its start-up validation, so step k+1 reports no sync of its own)."""
    noisy = ("timing_s/", "timing_per_token_ms/", "perf/", "rollout/weight_sync")
    return {k: v for k, v in metrics.items() if not k.startswith(noisy)}


def failure_report(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout tail ---\n{proc.stdout[-3000:]}\n--- stderr tail ---\n{proc.stderr[-6000:]}"
