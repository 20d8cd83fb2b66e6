"""Override keys are checked before Hydra composes: unknown keys name the closest valid key."""

from __future__ import annotations

import pytest

from hybridrl.config import (
    ConfigError,
    closest_keys,
    compose_config,
    flatten_keys,
    load_config,
    prepare_overrides,
)


def test_misspelled_key_suggests_the_closest():
    with pytest.raises(ConfigError) as info:
        prepare_overrides(["trainer.totl_epochs=3"])
    (problem,) = info.value.problems
    assert problem.key == "trainer.totl_epochs"
    assert "'trainer.total_epochs'" in problem.fix and "+trainer.totl_epochs=3" in problem.fix


def test_every_unknown_key_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        prepare_overrides(["trainer.totl_epochs=3", "data.max_promt_length=4", "~trainer.nope", "trainer.nnodes=1"])
    assert [p.key for p in info.value.problems] == ["trainer.totl_epochs", "data.max_promt_length", "trainer.nope"]
    assert "'data.max_prompt_length'" in info.value.problems[1].fix


def test_new_key_inside_an_existing_dict_needs_plus():
    with pytest.raises(ConfigError):
        prepare_overrides(["actor_rollout_ref.model.override_config.attention_dropout=0.0"])
    config = compose_config("ppo_trainer", ["+actor_rollout_ref.model.override_config.attention_dropout=0.0"])
    assert config.actor_rollout_ref.model.override_config.attention_dropout == 0.0


def test_plus_on_allowlisted_additions_is_accepted_like_verl():
    # verl users add keys verl only reads with .get(); hybridrl lists them, so '+' becomes a plain override
    assert prepare_overrides(["+data.seed=7", "+data.brand_new=1"]) == ["data.seed=7", "+data.brand_new=1"]
    config = compose_config("ppo_trainer", ["+data.seed=7", "+algorithm.filter_groups.enable=True"])
    assert config.data.seed == 7 and config.algorithm.filter_groups.enable is True


def test_hydra_and_list_overrides_pass_through():
    overrides = ["hydra.run.dir=/tmp/x", "trainer.logger=[console,tensorboard]"]
    assert prepare_overrides(overrides) == overrides
    assert list(compose_config("ppo_trainer", overrides[1:]).trainer.logger) == ["console", "tensorboard"]


def test_closest_keys():
    keys = flatten_keys(load_config("ppo_trainer"))
    assert (
        closest_keys("actor_rollout_ref.actor.ppo_mini_batchsize", keys)[0]
        == "actor_rollout_ref.actor.ppo_mini_batch_size"
    )
    assert closest_keys("trainer.totl_epochs", keys)[0] == "trainer.total_epochs"
    # a leaf put under the wrong section is found by its name
    assert "actor_rollout_ref.rollout.temperature" in closest_keys("actor_rollout_ref.actor.temperature", keys)


def test_cli_argv_keeps_flags_and_leaves_recipe_configs_to_hydra():
    from hybridrl.config import prepare_cli_argv

    assert prepare_cli_argv(["--cfg", "job", "+data.seed=2", "trainer.nnodes=1"]) == [
        "--cfg",
        "job",
        "data.seed=2",
        "trainer.nnodes=1",
    ]
    with pytest.raises(ConfigError):
        prepare_cli_argv(["--cfg", "job", "trainer.totl_epochs=3"])
    # a recipe's own YAML may define keys ppo_trainer.yaml lacks: Hydra checks those itself
    recipe = ["--config-name", "dapo_trainer", "trainer.totl_epochs=3"]
    assert prepare_cli_argv(recipe) == recipe
