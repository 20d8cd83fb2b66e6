"""Rollout correction against a deliberately off-policy rollout, in real GRPO runs on the tiny model (digit task).

``main_ppo`` runs (real Ray, 2 FSDP2 CPU workers, hybridrl/recipes/digit_reward.py, 8 prompts × n=4 per step) whose
rollout engine is the real hf engine with one perturbation (``rollout_correction_learning_engine.py``, registered in the
workers through ``actor_rollout_ref.model.external_lib``):

- ``hf_stale_weights``: samples training batches with the weights of 2 syncs ago (2-version staleness);
- ``hf_perturbed_temperature``: samples at another temperature than ``rollout.temperature`` (the trainer's).

Both report ``rollout_log_probs`` of the distribution they really sampled from, so ``rollout_corr/*`` sees a real
behaviour policy μ ≠ π. These tests check what the metrics see in 2–3 steps. Whether truncated IS restores
on-policy learning under a 2-version-stale rollout (3 runs × 10 steps, one pinned seed) is measured by
``python scripts/bench/bench_learning.py --runs rollout_correction``; the measurements over 5 seeds, and what they
do and do not show, are in docs/rollout-correction.md, "Learning test".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.trainer.e2e import as_overrides, cpu_run_args, failure_report, read_metrics, run_main_ppo

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAINER_TEMPERATURE = 0.25  # sharpens the tiny model's flat logits (std 0.17) so that policy changes show
STALENESS = "+actor_rollout_ref.rollout.engine_kwargs.perturbed.staleness"
SAMPLING_TEMPERATURE = "+actor_rollout_ref.rollout.engine_kwargs.perturbed.sampling_temperature"
CORRECTION = {"algorithm.rollout_correction.rollout_is": "token"}  # TIS, rollout_is_threshold 2.0 (default)
VAL_REWARD = "val-aux/arithmetic/reward/mean@4"
# on-policy: the hf engine's log-probs are the trainer's (fp32, same weights); measured |kl| <= 5e-8, diff <= 6e-7
ON_POLICY_TOLERANCE = 1e-5

# The learning comparison's settings (scripts/bench/bench_learning.py runs them for 10 steps; the smoke for 3).
LEARNING_SEED = 2
STALENESS_VERSIONS = 2


def run_grpo(name: str, model_dir: str, data_dir: str, tmp_path: Path, steps: int, **overrides: object):
    """A GRPO run of ``steps`` steps; returns ``{step: metrics}``."""
    args = {
        **cpu_run_args(model_dir, data_dir, str(tmp_path / name / "ckpt")),
        "algorithm.adv_estimator": "grpo",
        "custom_reward_function.path": str(REPO_ROOT / "hybridrl" / "recipes" / "digit_reward.py"),
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
        "actor_rollout_ref.model.external_lib": "tests.trainer.rollout_correction_learning_engine",
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.temperature": TRAINER_TEMPERATURE,
        "trainer.total_training_steps": steps,
        "trainer.total_epochs": steps,  # small data sets hold fewer batches than steps
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.save_freq": -1,
        **overrides,
    }
    metrics_file = str(tmp_path / f"{name}.jsonl")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    proc = run_main_ppo(as_overrides(args, {}), metrics_file, timeout=900, extra_env=env, cwd=str(REPO_ROOT))
    assert proc.returncode == 0, failure_report(proc)
    return read_metrics(metrics_file)


def make_digit_task_data(out: Path) -> str:
    """84 train / 16 test one-digit additions (hybridrl/recipes/common_cpu.sh's set: 10 batches of 8 per epoch)."""
    import subprocess
    import sys

    script = REPO_ROOT / "examples" / "data_preprocess" / "arithmetic.py"
    subprocess.run([sys.executable, str(script), "--local_dir", str(out), "--train_size", "84", "--test_size", "16",
                    "--digits", "1", "--operators", "+"], check=True, capture_output=True)
    return str(out)


def stale_rollout_overrides(steps: int) -> dict[str, object]:
    """The learning comparison's common settings: the 2-version-stale engine, a fast-moving policy, sampled
    validation at the trainer's temperature after the last step."""
    return {
        "actor_rollout_ref.rollout.name": "hf_stale_weights",
        "actor_rollout_ref.actor.optim.lr": 4e-3,  # policy moves enough per step for 2 versions to matter
        # validation samples π at the trainer's temperature with fresh weights (the engine never perturbs it)
        "actor_rollout_ref.rollout.val_kwargs.do_sample": True,
        "actor_rollout_ref.rollout.val_kwargs.temperature": TRAINER_TEMPERATURE,
        "actor_rollout_ref.rollout.val_kwargs.n": 4,
        "actor_rollout_ref.rollout.seed": LEARNING_SEED,
        "data.seed": LEARNING_SEED,
        "trainer.test_freq": steps,
    }


def test_a_two_version_stale_rollout_starts_on_policy_then_is_seen_off_policy(tiny_model_dir, tmp_path):
    """The stale engine samples step 1 with the current weights (no older version yet): its log-probs are the
    trainer's, token by token; step 3 samples with the weights of 2 updates ago, and ``rollout_corr/*`` sees it."""
    steps = 3
    data_dir = make_digit_task_data(tmp_path / "digit_task")
    metrics = run_grpo("stale_corrected", tiny_model_dir, data_dir, tmp_path, steps,
                       **{**stale_rollout_overrides(steps), STALENESS: STALENESS_VERSIONS, **CORRECTION})
    assert abs(metrics[1]["rollout_corr/kl"]) < ON_POLICY_TOLERANCE
    assert metrics[1]["training/rollout_probs_diff_max"] < ON_POLICY_TOLERANCE
    assert metrics[steps]["rollout_corr/kl"] > 1e-3, metrics[steps]["rollout_corr/kl"]  # really off-policy
    assert metrics[steps]["rollout_corr/rollout_is_max"] <= 2.0 + 1e-6  # truncated at rollout_is_threshold
    assert VAL_REWARD in metrics[steps]


def test_a_temperature_perturbed_rollout_is_seen_and_truncated_is_weighted(tiny_model_dir, arithmetic_data_dir, tmp_path):
    steps = 2
    metrics = run_grpo("perturbed_temperature", tiny_model_dir, arithmetic_data_dir, tmp_path, steps,
                   **{"actor_rollout_ref.rollout.name": "hf_perturbed_temperature", SAMPLING_TEMPERATURE: 0.4,
                      "actor_rollout_ref.rollout.seed": 1, "data.seed": 1, **CORRECTION})
    for step in range(1, steps + 1):
        m = metrics[step]
        assert m["rollout_corr/kl"] > 5e-3, m["rollout_corr/kl"]  # measured 0.015-0.08 per step over 15 steps
        assert m["rollout_corr/ppl_ratio"] > 1.0  # μ (hotter) is less certain of its samples than π
        assert m["rollout_corr/rollout_is_max"] <= 2.0 + 1e-6  # truncated at rollout_is_threshold
        assert m["rollout_corr/rollout_is_min"] < 0.9 and m["rollout_corr/rollout_is_std"] > 0.05
