"""Estimator inputs checked before Ray starts: verl 0.9's new estimator names, GDPO's keys, OTB's Σπ²."""

from __future__ import annotations

import pytest

from hybridrl.config import collect_problems, compose_config
from hybridrl.trainer.ppo.core_algos import AdvantageEstimator

SUM_PI_SQUARED = "actor_rollout_ref.actor.calculate_sum_pi_squared"


def _problems(cpu_overrides, *extra):
    return collect_problems(compose_config("ppo_trainer", [*cpu_overrides, *extra]))


@pytest.mark.parametrize("estimator", ["grpo_vectorized", "rloo_vectorized"])
def test_new_critic_free_estimators_are_accepted(cpu_overrides, estimator):
    assert _problems(cpu_overrides, f"algorithm.adv_estimator={estimator}") == []


def test_every_registered_estimator_name_passes_the_name_check():
    from hybridrl.config.checks_algorithm import ADV_ESTIMATORS

    assert set(ADV_ESTIMATORS) == {member.value for member in AdvantageEstimator}


def test_gdpo_needs_its_reward_keys(cpu_overrides):
    problems = _problems(cpu_overrides, "algorithm.adv_estimator=gdpo")
    assert [p.key for p in problems] == ["algorithm.gdpo_reward_keys"]
    assert "algorithm.gdpo_reward_keys='[" in problems[0].fix
    # verl 0.9's example scripts add the key (+algorithm...): the same as setting the shipped one
    for override in ("+algorithm.gdpo_reward_keys=[acc,fmt]", "algorithm.gdpo_reward_keys=[acc,fmt]"):
        assert _problems(cpu_overrides, "algorithm.adv_estimator=gdpo", override) == []


@pytest.mark.parametrize("estimator", ["optimal_token_baseline", "tir_optimal_token_baseline"])
def test_token_baseline_needs_sum_pi_squared_from_the_actor(cpu_overrides, estimator):
    problems = _problems(cpu_overrides, f"algorithm.adv_estimator={estimator}")
    assert [p.key for p in problems] == [SUM_PI_SQUARED]
    assert f"{SUM_PI_SQUARED}=True" in problems[0].fix
    # with the flag the config composes (the key is in the shipped YAML, verl 0.9's name)
    assert _problems(cpu_overrides, f"algorithm.adv_estimator={estimator}", f"{SUM_PI_SQUARED}=True") == []


@pytest.mark.parametrize(
    "skip", ["actor_rollout_ref.actor.recompute_old_log_prob=False", "algorithm.rollout_correction.bypass_mode=True"]
)
def test_token_baseline_refuses_settings_that_skip_the_old_log_prob_forward(cpu_overrides, skip):
    problems = _problems(
        cpu_overrides, "algorithm.adv_estimator=optimal_token_baseline", f"{SUM_PI_SQUARED}=True", skip
    )
    skip_key = skip.split("=")[0]
    expected = f"optimal_token_baseline needs Σπ² from the actor's old-log-prob forward, which {skip} skips."
    assert expected in [p.message for p in problems if p.key == skip_key]
