"""Freeze the config surface: each YAML carries exactly verl 0.5's keys (+ the allow-listed additions)
with verl 0.5's defaults, and every key is documented by a comment. A hybridrl-only YAML (``serve``) has no
verl counterpart: its whole key set is the allow-list's lines for it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from hybridrl.config import (
    CONFIG_NAMES,
    HYBRIDRL_CONFIG_NAMES,
    allowed_additions,
    config_dir,
    flatten_keys,
    load_config,
)

# verl 0.5's key lists (key<TAB>default, one per line), checked in so the freeze never depends on files
# outside the repository.
REFERENCE = Path(__file__).resolve().parent / "reference"
# Deliberate deviations from verl 0.5 (documented in configs/ppo_trainer.yaml).
DEVIATIONS = {
    "ppo_trainer": {"actor_rollout_ref.actor.strategy": "fsdp2", "critic.strategy": "fsdp2"},
}


def _tsv(name: str) -> dict[str, object]:
    path = REFERENCE / f"verl-0.5-{name}-keys.tsv"
    rows = {}
    for line in path.read_text().splitlines():
        if line.strip():
            key, value = line.split("\t", 1)
            rows[key] = ast.literal_eval(value)  # None/True/False, numbers, quoted strings, lists, {}
    return rows


def _as_omegaconf_reads(value: object) -> object:
    """The TSV was written with PyYAML, which reads `1e-5` as a string; OmegaConf (verl's loader) reads a float."""
    if isinstance(value, str) and re.fullmatch(r"[-+]?[0-9.]+[eE][-+]?[0-9]+", value):
        loaded = OmegaConf.create(f"v: {value}")["v"]
        assert isinstance(loaded, float)
        return loaded
    return value


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_key_set_is_verl_plus_allowlisted_additions(name):
    verl_keys = set(_tsv(name))
    ours = set(flatten_keys(load_config(name)))
    additions = allowed_additions(name)
    assert not (additions & verl_keys), f"allow-listed keys that verl already has: {sorted(additions & verl_keys)}"
    assert sorted(verl_keys - ours) == [], "verl 0.5 keys missing from the YAML"
    assert sorted(ours - verl_keys - additions) == [], "keys not in verl 0.5 and not on configs/additions_allowlist.txt"
    assert sorted(additions - ours) == [], "allow-listed keys missing from the YAML"


@pytest.mark.parametrize("name", HYBRIDRL_CONFIG_NAMES)
def test_hybridrl_only_config_keys_are_exactly_its_allowlist_lines(name):
    assert not (REFERENCE / f"verl-0.5-{name}-keys.tsv").exists(), (
        f"{name} has a verl counterpart: list it in CONFIG_NAMES"
    )
    assert not set(CONFIG_NAMES) & set(HYBRIDRL_CONFIG_NAMES)
    ours = set(flatten_keys(load_config(name)))
    additions = allowed_additions(name)
    assert sorted(ours - additions) == [], "keys of a hybridrl-only YAML missing from configs/additions_allowlist.txt"
    assert sorted(additions - ours) == [], "allow-listed keys missing from the YAML"


def test_every_shipped_yaml_is_frozen_by_a_test():
    shipped = {path.stem for path in config_dir().glob("*.yaml")}
    assert shipped == set(CONFIG_NAMES) | set(HYBRIDRL_CONFIG_NAMES)


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_defaults_equal_verl(name):
    ours = flatten_keys(load_config(name))
    deviations = DEVIATIONS.get(name, {})
    mismatches = []
    for key, verl_value in _tsv(name).items():
        expected = deviations.get(key, _as_omegaconf_reads(verl_value))
        value = ours[key]
        if value != expected or type(value) is not type(expected):
            mismatches.append(f"{key}: ours {value!r} verl {verl_value!r}")
    assert mismatches == []


def test_deviation_and_additions_are_what_the_yaml_says():
    config = load_config("ppo_trainer")
    assert config.actor_rollout_ref.actor.strategy == "fsdp2"
    assert config.critic.strategy == "fsdp2"
    resolved = OmegaConf.to_container(config, resolve=True)
    # verl reads these with config.get(key, default); the YAML carries the same defaults.
    assert resolved["data"]["seed"] == 1
    assert resolved["data"]["gen_batch_size"] == resolved["data"]["train_batch_size"] == 1024
    assert resolved["actor_rollout_ref"]["actor"]["policy_loss"]["loss_mode"] == "vanilla"
    assert resolved["algorithm"]["filter_groups"] == {"enable": False, "metric": None, "max_num_gen_batches": 0}
    # verl-style interpolations resolve the same way.
    assert resolved["critic"]["ppo_mini_batch_size"] == 256
    assert resolved["actor_rollout_ref"]["actor"]["checkpoint"]["load_contents"] == ["model", "optimizer", "extra"]


_KEY_LINE = re.compile(r"^(\s*)([\w-]+):")


@pytest.mark.parametrize("name", CONFIG_NAMES + HYBRIDRL_CONFIG_NAMES)
def test_every_key_has_a_comment_above_it(name):
    lines = (config_dir() / f"{name}.yaml").read_text().splitlines()
    undocumented = []
    for index, line in enumerate(lines):
        match = _KEY_LINE.match(line)
        if match:
            previous = next((p for p in reversed(lines[:index]) if p.strip()), "")
            if not previous.strip().startswith("#"):
                undocumented.append(f"{name}.yaml:{index + 1}: {match.group(2)}")
    assert undocumented == []


def test_additions_are_marked_in_the_yaml():
    text = (config_dir() / "ppo_trainer.yaml").read_text()
    # each allow-listed section or leaf appears under a comment saying [addition] (leaf or its parent)
    marked_leaves = set(re.findall(r"# \[addition\][^\n]*\n(?:\s*#[^\n]*\n)*\s*([\w-]+):", text))
    for key in allowed_additions("ppo_trainer"):
        parts = key.split(".")
        assert parts[-1] in marked_leaves or parts[-2] in marked_leaves, f"{key} lacks an [addition] comment"
