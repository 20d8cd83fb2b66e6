"""The command lines, end to end in subprocesses: main_ppo (--cfg job, errors) and the plan command."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

# Run main_ppo's __main__ and report whether torch/ray got imported before it exited.
_RUN_MAIN = """
import runpy, sys
sys.argv = ["main_ppo", *sys.argv[1:]]
try:
    runpy.run_module("hybridrl.trainer.main_ppo", run_name="__main__")
finally:
    print("HEAVY", "torch" in sys.modules, "ray" in sys.modules, file=sys.stderr)
"""


def _run(args, cwd, code=None):
    command = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_cfg_job_prints_the_tree_with_overrides(tmp_path):
    result = _run(
        ["hybridrl.trainer.main_ppo", "--cfg", "job", "trainer.logger=[console,tensorboard]", "+data.seed=3"], tmp_path
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for fragment in ("ppo_mini_batch_size: 256", "rollout_probs_diff_max_bound: null", "seed: 3", "- tensorboard"):
        assert fragment in out


def test_unknown_override_names_the_closest_key(tmp_path):
    result = _run(["trainer.totl_epochs=3"], tmp_path, code=_RUN_MAIN)
    assert result.returncode != 0
    assert "trainer.totl_epochs" in result.stderr and "'trainer.total_epochs'" in result.stderr
    assert "HEAVY False False" in result.stderr


def test_non_dividing_batch_fails_before_anything_heavy(tmp_path):
    args = [
        "data.train_batch_size=7",
        "trainer.device=cpu",
        "actor_rollout_ref.rollout.name=hf",
        f"hydra.run.dir={tmp_path}/run",
    ]
    result = _run(args, tmp_path, code=_RUN_MAIN)
    assert result.returncode != 0
    assert "data.train_batch_size" in result.stderr and "multiple of 8" in result.stderr
    assert "HEAVY False False" in result.stderr


def test_valid_config_prints_the_plan_then_reaches_the_file_checks(tmp_path):
    for name in ("train.parquet", "test.parquet"):
        (tmp_path / name).write_bytes(b"PAR1")
    args = [
        f"data.train_files={tmp_path / 'train.parquet'}",
        f"data.val_files={tmp_path / 'test.parquet'}",
        f"actor_rollout_ref.model.path={tmp_path}",
        "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.name=hf",
        "algorithm.adv_estimator=grpo",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",
        f"hydra.run.dir={tmp_path}/run",
    ]
    result = _run(["hybridrl.trainer.main_ppo", *args], tmp_path)
    assert "Batch plan" in result.stdout and "samples per rank per step" in result.stdout
    # the config passes; the preflight (before Ray) reports the (deliberately corrupt) parquet by file name
    assert result.returncode != 0 and "train.parquet" in result.stdout + result.stderr


def test_plan_command(tmp_path):
    args = [
        "data.train_batch_size=16",
        "actor_rollout_ref.rollout.n=4",
        "--dataset-len",
        "100",
        "trainer.n_gpus_per_node=2",
    ]
    result = _run(["hybridrl.config.plan", *args], tmp_path)
    # the defaults leave micro-batches unset: the plan prints, the problems follow, exit 1
    assert "samples per step" in result.stdout and "steps per epoch" in result.stdout
    assert result.returncode == 1 and "ppo_micro_batch_size_per_gpu" in result.stderr
