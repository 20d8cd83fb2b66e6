"""A diverged run stops (issue 21, finding 3): ``actor.optim.lr=1e10`` on the tiny model through ``main_ppo``.

Before the guard this run exited 0, skipped every non-finite step behind one warning and saved the broken model
at every step (on this model: died at step 2 in the sampler with torch's "probability tensor contains inf/nan").
Step 1's AdamW step has a finite grad norm and moves every weight by ~1e10: the guard sees the global weight norm
explode in that step and stops the run there, before the step-1 checkpoint, with a non-zero exit code.
"""

from __future__ import annotations

import os

import pytest

from tests.trainer.e2e import failure_report, grpo_args, run_main_ppo

pytestmark = pytest.mark.slow


def test_lr_1e10_run_stops_with_an_error_and_saves_nothing_after_divergence(
    tiny_model_dir, arithmetic_data_dir, tmp_path
):
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    args = grpo_args(
        tiny_model_dir, arithmetic_data_dir, ckpt,
        **{
            "actor_rollout_ref.actor.optim.lr": 1e10,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 8,  # one optimizer step per training step
            "trainer.total_epochs": 3,
            "trainer.total_training_steps": 6,
            "trainer.save_freq": 1,
            "trainer.test_freq": -1,
            "trainer.val_before_train": False,
        },
    )
    proc = run_main_ppo(args, metrics_file, timeout=400)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, failure_report(proc)
    assert "DivergenceError" in output and "changed the global weight norm" in output, failure_report(proc)
    assert "training step 1 failed in stage 'update_actor'" in output, failure_report(proc)  # the driver names the step
    assert "optim.lr=10000000000.0" in output and "dtype" in output
    assert not os.path.exists(os.path.join(ckpt, "latest_checkpointed_iteration.txt"))
    assert os.listdir(ckpt) == []  # created and probed by the preflight (save_freq=1); nothing saved in it
