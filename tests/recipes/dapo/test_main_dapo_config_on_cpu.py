"""dapo_trainer.yaml's values, and the checks main_dapo adds before Ray starts."""

from __future__ import annotations

import pytest

from hybridrl.config import ConfigError
from hybridrl.recipes.config import DAPO_CONFIG_DIR, compose_recipe_config
from hybridrl.recipes.dapo.main_dapo import dapo_problems


def test_dapo_trainer_yaml_selects_dapo():
    config = compose_recipe_config(DAPO_CONFIG_DIR, "dapo_trainer", ["data.train_batch_size=16"])
    actor = config.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert actor.loss_agg_mode == "token-mean" and actor.use_kl_loss is False
    assert config.algorithm.adv_estimator == "grpo" and config.algorithm.use_kl_in_reward is False
    filter_groups = {"enable": True, "metric": "acc", "max_num_gen_batches": 10, "max_inflight_gen_batches": 1}
    assert dict(config.algorithm.filter_groups) == filter_groups  # the last one verl 0.9's, at its default
    assert config.reward_model.reward_manager == "dapo"
    assert config.data.gen_batch_size == 16  # follows data.train_batch_size unless set
    assert dapo_problems(config) == []


def test_dapo_problems_name_the_key_and_the_fix():
    config = compose_recipe_config(DAPO_CONFIG_DIR, "dapo_trainer", [
        "algorithm.filter_groups.metric=null", "algorithm.filter_groups.max_num_gen_batches=-1",
        "data.gen_batch_size=0",
    ])
    problems = {problem.key: str(problem) for problem in dapo_problems(config)}
    assert sorted(problems) == ["algorithm.filter_groups.max_num_gen_batches", "algorithm.filter_groups.metric",
                                "data.gen_batch_size"]
    assert "seq_reward" in problems["algorithm.filter_groups.metric"]
    assert "0 (no limit)" in problems["algorithm.filter_groups.max_num_gen_batches"]


def test_unknown_override_names_the_closest_key():
    with pytest.raises(ConfigError, match="algorithm.filter_groups.metric"):
        compose_recipe_config(DAPO_CONFIG_DIR, "dapo_trainer", ["algorithm.filter_groups.metrc=acc"])


@pytest.mark.slow  # spawns the CLI (it stops before Ray starts)
def test_main_dapo_cli_reports_every_problem_and_exits_1(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "hybridrl.recipes.dapo.main_dapo", "algorithm.filter_groups.metric=null",
         f"data.train_files={tmp_path}/missing.parquet", "trainer.device=cpu"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "algorithm.filter_groups.metric" in proc.stderr and "data.train_files" in proc.stderr
    assert "Traceback" not in proc.stderr
