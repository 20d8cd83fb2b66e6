"""``main_ppo`` with images: 2 GRPO steps of the tiny Qwen2-VL on the shapes task (hf rollout, 2 FSDP workers)."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from vlm_testlib import shapes_rows

from tests.trainer.e2e import failure_report, grpo_args, read_metrics, run_main_ppo

pytestmark = pytest.mark.slow


def test_grpo_on_images_two_steps(tiny_vlm_dir, tmp_path):
    rows = shapes_rows(6)
    pq.write_table(pa.Table.from_pylist(rows[:4]), str(tmp_path / "train.parquet"))
    pq.write_table(pa.Table.from_pylist(rows[4:]), str(tmp_path / "test.parquet"))
    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    small = {
        "data.train_batch_size": 2,
        "data.max_response_length": 4,
        "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 2,
        "trainer.save_freq": -1,
        # the rollout's log-probs against the actor's: both forwards must have seen the same images
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "trainer.rollout_probs_diff_max_bound": 1e-3,
        # a gradient although no random response names a colour (all advantages 0)
        "actor_rollout_ref.actor.entropy_coeff": 0.01,
    }
    proc = run_main_ppo(grpo_args(tiny_vlm_dir("qwen2_vl"), str(tmp_path), ckpt, **small), metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(metrics_file)
    for step in (1, 2):
        for name in ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "critic/score/mean", "response_length/mean"):
            assert math.isfinite(metrics[step][name]), (step, name)
    assert metrics[1]["actor/grad_norm"] > 0
    assert metrics[1]["training/rollout_probs_diff_max"] < 1e-3
    assert metrics[1]["actor/image_check_samples"] > 0  # each rank's samples met the rollout's image fingerprints
    assert any(key.startswith("val-core/shapes/") for key in metrics[2]), sorted(metrics[2])
