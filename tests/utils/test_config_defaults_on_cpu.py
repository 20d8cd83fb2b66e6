"""Defaults are filled once: a filled config is marked, and the next constructor it reaches does not merge the YAML."""

from __future__ import annotations

import pickle

import pytest
from omegaconf import OmegaConf, open_dict

from hybridrl.utils import config_defaults
from hybridrl.utils.config_defaults import is_filled, section_with_defaults, with_defaults


def test_a_partial_tree_is_filled_and_marked_with_each_section_at_its_path():
    config = with_defaults({"data": {"train_batch_size": 4}})
    assert config.data.train_batch_size == 4 and config.data.seed == 1  # the user's value; the YAML's
    assert is_filled(config) and is_filled(config.actor_rollout_ref.actor, "actor_rollout_ref.actor")
    assert not is_filled(config, name="sft_trainer")
    # the ref section is filled as the ref, not as an actor section (the ref's DataParallelPPOActor fills it)
    assert not is_filled(config.actor_rollout_ref.ref, "actor_rollout_ref.actor")
    assert not is_filled(OmegaConf.create({"data": {}})) and not is_filled({"data": {}})


def test_filled_trees_and_sections_skip_the_yaml(monkeypatch):
    config = with_defaults({"actor_rollout_ref": {"rollout": {"n": 4}}})
    section = pickle.loads(pickle.dumps(config.actor_rollout_ref))  # as a Ray worker receives it
    monkeypatch.setattr(config_defaults, "_shipped_copy", lambda name: pytest.fail(f"filled again from {name}"))
    assert with_defaults(config) is config
    filled = section_with_defaults(section, "actor_rollout_ref")  # resolved and detached only
    assert filled is not section and filled.rollout.n == 4 and filled._get_parent() is None
    assert is_filled(filled.actor, "actor_rollout_ref.actor")
    assert section_with_defaults(config.data, "data").seed == 1


def test_a_section_replaced_after_the_fill_is_filled_again():
    config = with_defaults({})
    with open_dict(config):
        config.critic = {"ppo_epochs": 2}
    assert not is_filled(config.critic, "critic")
    critic = section_with_defaults(config.critic, "critic")
    assert critic.ppo_epochs == 2 and critic.optim.lr == pytest.approx(1e-5)
