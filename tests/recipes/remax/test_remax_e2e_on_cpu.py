"""hybridrl/recipes/remax/run_remax_cpu.sh end to end: the greedy baseline generation runs on the real workers."""

from __future__ import annotations

import pytest

from tests.recipes.cli import run_recipe_script
from tests.trainer.e2e import failure_report, read_metrics

pytestmark = pytest.mark.slow


def test_remax_cpu_script_runs_the_greedy_baseline(tiny_model_dir, recipe_data_dir, tmp_path):
    proc, metrics_file = run_recipe_script(
        "remax/run_remax_cpu.sh", tiny_model_dir, recipe_data_dir, tmp_path,
        "trainer.total_training_steps=2", "trainer.test_freq=-1", "trainer.val_before_train=False",
    )
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(str(metrics_file))
    assert sorted(metrics) == [1, 2]
    for name in ("timing_s/gen_max", "actor/reward_kl_penalty", "actor/pg_loss", "critic/advantages/mean",
                 "timing_s/ref"):
        assert name in metrics[2], name
    assert metrics[2]["training/global_step"] == 2
