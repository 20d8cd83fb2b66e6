"""hybridrl/recipes/dapo/run_dapo_cpu.sh end to end (real Ray, 2 FSDP2 CPU workers): dynamic sampling, and it learns.

The reward (hybridrl/recipes/digit_reward.py) pays the share of digits in the answer minus DAPO's overlong penalty
(-0.5 for a response that fills its 8 tokens). The random tiny model starts at -0.5 on the held-out prompts
(greedy answers without a digit) and must end clearly higher after 15 seeded steps.
"""

from __future__ import annotations

import pytest

from tests.recipes.cli import run_recipe_script
from tests.trainer.e2e import failure_report, read_metrics

pytestmark = pytest.mark.slow

VAL_REWARD = "val-aux/arithmetic/reward/mean@1"


def test_dapo_cpu_script_filters_groups_and_raises_the_reward(tiny_model_dir, recipe_data_dir, tmp_path):
    proc, metrics_file = run_recipe_script(
        "dapo/run_dapo_cpu.sh", tiny_model_dir, recipe_data_dir, tmp_path,
        "trainer.total_training_steps=15", "trainer.test_freq=5", "algorithm.filter_groups.max_num_gen_batches=0",
    )
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(str(metrics_file))
    assert sorted(metrics) == list(range(16))  # step 0 = validation before training
    num_gen_batches = [metrics[step]["train/num_gen_batches"] for step in range(1, 16)]
    assert all(n >= 1 for n in num_gen_batches)
    assert max(num_gen_batches) > 1, num_gen_batches  # some steps needed more than one generation batch
    assert "[dapo]" in proc.stdout and "keep generating" in proc.stdout
    for name in ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl", "critic/score/mean",
                 "timing_s/gen", "timing_s/step", "response_length/mean"):
        assert name in metrics[15], name
    assert "actor/kl_loss" not in metrics[15]  # DAPO drops the KL term
    # learns: greedy answers on held-out prompts go from no digits (-0.5) to mostly digits
    assert metrics[15][VAL_REWARD] >= metrics[0][VAL_REWARD] + 0.5, (metrics[0][VAL_REWARD], metrics[15][VAL_REWARD])
