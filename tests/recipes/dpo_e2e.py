"""Helpers for the online-DPO / SPIN CLI tests: command lines on the tiny model, 2 CPU workers."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.trainer.e2e import as_overrides, cpu_run_args, run_module

ASSETS = Path(__file__).parent / "assets"


def dpo_args(model_dir: str, data_dir: str, ckpt_dir: str, **overrides: object) -> list[str]:
    """A small online-DPO run: 8 prompts × n=4 per step on 2 CPU workers, hf rollout, 8-token responses."""
    args = {
        **cpu_run_args(model_dir, data_dir, ckpt_dir),
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "trainer.test_freq": -1,
        "trainer.save_freq": -1,
        "trainer.val_before_train": False,
    }
    return as_overrides(args, overrides)


def run_recipe(module: str, args: list[str], metrics_file: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m <module> args`` with the file logger writing ``metrics_file``."""
    return run_module(module, args, metrics_file, timeout=timeout)
