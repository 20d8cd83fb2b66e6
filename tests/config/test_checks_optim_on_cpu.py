"""checks_optim: a learning rate that is not a finite number >= 0, or a divergence bound < 1, is refused at config
validation (before Ray starts), naming the key (issue 21, finding 3)."""

from __future__ import annotations

import pytest

from hybridrl.config import collect_problems, compose_config

ACTOR_LR = "actor_rollout_ref.actor.optim.lr"


def _problems_of(overrides: list[str], key: str) -> list:
    return [p for p in collect_problems(compose_config("ppo_trainer", overrides)) if p.key == key]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1e-6", "fast", "true"])
def test_actor_lr_not_a_finite_number_is_refused(cpu_overrides, value):
    problems = _problems_of([*cpu_overrides, f"{ACTOR_LR}={value}"], ACTOR_LR)
    assert len(problems) == 1
    assert "finite number >= 0" in problems[0].message and "1e-6" in problems[0].fix


@pytest.mark.parametrize("value", ["0", "1e-6", "1e10", "3"])
def test_finite_learning_rates_pass(cpu_overrides, value):
    # 0 = the frozen control run; 1e10 is finite: the divergence guard stops it at run time
    assert _problems_of([*cpu_overrides, f"{ACTOR_LR}={value}"], ACTOR_LR) == []


def test_critic_lr_is_checked_only_when_a_critic_is_used(cpu_overrides):
    assert _problems_of([*cpu_overrides, "critic.optim.lr=nan"], "critic.optim.lr") == []  # GRPO: no critic
    with_critic = [*cpu_overrides, "algorithm.adv_estimator=gae", "critic.optim.lr=nan"]
    assert [p.key for p in _problems_of(with_critic, "critic.optim.lr")] == ["critic.optim.lr"]


def test_divergence_bound_below_one_is_refused(cpu_overrides):
    key = "actor_rollout_ref.actor.max_consecutive_nonfinite_steps"
    problems = _problems_of([*cpu_overrides, f"{key}=0"], key)
    assert len(problems) == 1 and "positive integer" in problems[0].message

