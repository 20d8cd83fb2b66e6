"""Helpers for the online-DPO / SPIN CLI tests: command lines on the tiny model, 2 CPU workers."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.trainer.e2e import run_module

ASSETS = Path(__file__).parent / "assets"


def dpo_args(model_dir: str, data_dir: str, ckpt_dir: str, **overrides: object) -> list[str]:
    """A small online-DPO run: 8 prompts × n=4 per step on 2 CPU workers, hf rollout, 8-token responses."""
    args: dict[str, object] = {
        "data.train_files": f"{data_dir}/train.parquet",
        "data.val_files": f"{data_dir}/test.parquet",
        "data.train_batch_size": 8,
        "data.max_prompt_length": 64,
        "data.max_response_length": 8,
        "data.dataloader_num_workers": 0,
        "actor_rollout_ref.model.path": model_dir,
        "actor_rollout_ref.model.enable_gradient_checkpointing": False,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 8,
        "actor_rollout_ref.actor.optim.lr": 1e-3,
        "actor_rollout_ref.rollout.name": "hf",
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
        "trainer.test_freq": -1,
        "trainer.save_freq": -1,
        "trainer.val_before_train": False,
        "trainer.logger": "[console,file]",
        "trainer.default_local_dir": ckpt_dir,
        "trainer.project_name": "e2e",
        "trainer.experiment_name": "run",
    }
    args.update(overrides)
    return [f"{key}={value}" for key, value in args.items()]


def run_recipe(module: str, args: list[str], metrics_file: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m <module> args`` with the file logger writing ``metrics_file``."""
    return run_module(module, args, metrics_file, timeout=timeout)
