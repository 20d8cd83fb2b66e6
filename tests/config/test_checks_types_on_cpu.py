"""checks_types: a value Hydra parsed as a number/boolean where the key means text (or text where it means a
boolean) is named with the expected type at config validation (issue 21, finding 4)."""

from __future__ import annotations

import pytest

from hybridrl.config import ConfigError, collect_problems, compose_config, validate_config


def _problem(overrides: list[str], key: str):
    problems = [p for p in collect_problems(compose_config("ppo_trainer", overrides)) if p.key == key]
    assert len(problems) == 1, problems
    return problems[0]


def test_reward_function_name_nan_names_the_key_and_the_expected_type(cpu_overrides):
    # before: Hydra's float NaN reached getattr() in the reward loader: "attribute name must be string"
    with pytest.raises(ConfigError) as raised:
        validate_config(compose_config("ppo_trainer", [*cpu_overrides, "reward.custom_reward_function.name=nan"]))
    assert "reward.custom_reward_function.name: expected a string, got float nan." in str(raised.value)
    assert "reward.custom_reward_function.name=\"'nan'\"" in str(raised.value)  # the quoting that keeps it text


@pytest.mark.parametrize(
    ("override", "key", "expected"),
    [
        ("data.prompt_key=1", "data.prompt_key", "a string"),
        ("data.reward_fn_key=true", "data.reward_fn_key", "a string"),
        ("actor_rollout_ref.actor.use_kl_loss=ture", "actor_rollout_ref.actor.use_kl_loss", "a boolean"),
        ("trainer.balance_batch=0.5", "trainer.balance_batch", "a boolean"),
    ],
)
def test_wrong_types_are_named(cpu_overrides, override, key, expected):
    assert _problem([*cpu_overrides, override], key).message.startswith(f"expected {expected}")


@pytest.mark.parametrize(
    "override",
    [
        "trainer.experiment_name=2024",  # a label: numbers are fine names
        "data.train_files=[a.parquet,b.parquet]",  # a list where the default is one path
        "actor_rollout_ref.actor.use_kl_loss=1",  # 0/1 for a boolean
        "algorithm.rollout_correction.rollout_is_threshold=0.5_5.0",  # numeric keys are not type-checked
        "custom_reward_function.name='nan'",  # quoted: text
    ],
)
def test_accepted_values_raise_no_type_problem(cpu_overrides, override):
    from hybridrl.config.checks_types import check_value_types

    assert check_value_types(compose_config("ppo_trainer", [*cpu_overrides, override])) == []
