"""Config checks of trainer.v1 and the rollout's own pool (torch-free, run before Ray starts)."""

from __future__ import annotations

import subprocess
import sys

from hybridrl.config.checks_async import check_async_modes
from hybridrl.config.validate import collect_problems
from tests.config_testlib import compose_config

SEPARATE = ["trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.rollout.nnodes=1",
            "actor_rollout_ref.rollout.n_gpus_per_node=1"]


def _keys(overrides: list[str]) -> list[str]:
    return [problem.key for problem in check_async_modes(compose_config("ppo_trainer", overrides))]


def test_defaults_and_valid_modes_pass():
    assert _keys([]) == []
    assert _keys(["trainer.v1.trainer_mode=colocate_async"]) == []
    assert _keys(SEPARATE) == []
    assert _keys([*SEPARATE, "actor_rollout_ref.rollout.mode=async"]) == []  # the agent loop on the rollout's pool
    assert _keys([*SEPARATE, "trainer.v1.separate_async.parameter_sync_step=1",
                  "trainer.v1.sampler.max_off_policy_threshold=1", "trainer.v1.sampler.max_off_policy_strategy=wait"]) == []


def test_unknown_mode_and_strategy_name_their_keys():
    problems = check_async_modes(compose_config("ppo_trainer", ["trainer.v1.trainer_mode=fully_async"]))
    assert [p.key for p in problems] == ["trainer.v1.trainer_mode"]
    assert "sync, colocate_async, separate_async" in str(problems[0])
    assert _keys(["trainer.v1.sampler.max_off_policy_strategy=evict"]) == ["trainer.v1.sampler.max_off_policy_strategy"]
    assert _keys(["trainer.v1.sampler.max_off_policy_threshold=0"]) == ["trainer.v1.sampler.max_off_policy_threshold"]


def test_separate_needs_its_pool():
    problems = check_async_modes(compose_config("ppo_trainer", ["trainer.v1.trainer_mode=separate_async"]))
    assert [p.key for p in problems] == ["actor_rollout_ref.rollout.nnodes"]
    assert "pool of its own" in str(problems[0]) and "nnodes=1" in str(problems[0])


def test_threshold_must_cover_the_push_period():
    """Pushes every 4 updates: the rollout lags up to 3 versions, so a threshold of 2 could starve the trainer."""
    problems = check_async_modes(compose_config("ppo_trainer", [*SEPARATE, "trainer.v1.sampler.max_off_policy_threshold=2"]))
    assert [p.key for p in problems] == ["trainer.v1.sampler.max_off_policy_threshold"]
    assert "at least 3" in str(problems[0])


def test_drop_with_more_batches_ahead_than_the_threshold_is_refused():
    overrides = ["trainer.v1.trainer_mode=colocate_async", "trainer.v1.colocate_async.num_warmup_batches=3",
                 "trainer.v1.sampler.max_off_policy_threshold=2"]
    assert _keys(overrides) == ["trainer.v1.colocate_async.num_warmup_batches"]
    assert _keys([*overrides, "trainer.v1.sampler.max_off_policy_strategy=wait"]) == []


def test_unsupported_combinations_are_refused():
    assert _keys(["trainer.v1.trainer_mode=colocate_async", "algorithm.adv_estimator=remax"]) == ["algorithm.adv_estimator"]
    assert _keys(["trainer.v1.trainer_mode=colocate_async", "trainer.rollout_probs_diff_max_bound=0.1"]) == [
        "trainer.rollout_probs_diff_max_bound"]
    assert _keys(["trainer.v1.sampler.sync_refill_failed_groups=True"]) == ["trainer.v1.sampler.sync_refill_failed_groups"]
    assert _keys(["trainer.v1.sampler.custom_sampler.path=x.py"]) == ["trainer.v1.sampler.custom_sampler.path"]


def test_validate_config_runs_the_checks():
    config = compose_config("ppo_trainer", ["trainer.v1.trainer_mode=separate_async"])
    assert "actor_rollout_ref.rollout.nnodes" in [p.key for p in collect_problems(config, check_env=False)]


def test_checks_do_not_import_torch():
    code = ("import sys; import hybridrl.config.checks_async; "
            "assert 'torch' not in sys.modules, 'checks_async imported torch'")
    subprocess.run([sys.executable, "-c", code], check=True)
