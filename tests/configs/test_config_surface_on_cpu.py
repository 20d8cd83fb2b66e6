"""Freeze the config surface. The two trainer files carry every key of verl 0.9's lists with verl 0.9's defaults,
the verl 0.5 keys 0.9 dropped with their 0.5 defaults, and the allow-listed additions; the other verl files carry
verl 0.5's keys and defaults. Every key is documented by a comment. A hybridrl-only YAML (``serve``) has no verl
counterpart: its whole key set is the allow-list's lines for it."""

from __future__ import annotations

import ast
import functools
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
from hybridrl.config.loading import has_key, to_plain
from hybridrl.utils.config_defaults import with_defaults

# The key lists (key<TAB>default, one per line), checked in so the freeze never depends on files outside the
# repository: verl 0.5's under reference/, verl 0.9's (the two trainer files) under tests/fixtures/.
REFERENCE = Path(__file__).resolve().parent / "reference"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TRAINERS = ("ppo_trainer", "ppo_megatron_trainer")
# Deliberate deviations from verl (each documented in configs/ppo_trainer.yaml or docs/verl-parity.md).
DEVIATIONS = {
    "data.gen_batch_size": "${data.train_batch_size}",  # verl 0.9: null, read as train_batch_size: the same value
    "data.seed": 1,  # verl 0.9: null; verl 0.5 read data.get("seed", 1): the same sampler seed
}
# FSDP2 by default (documented in configs/ppo_trainer.yaml): FSDP1 is legacy in PyTorch; its CPU offload crashes.
FSDP_DEVIATIONS = {"actor_rollout_ref.actor.strategy": "fsdp2", "critic.strategy": "fsdp2"}
# The Megatron policy worker has no server-mode rollout yet: async would always be refused.
MEGATRON_DEVIATIONS = {"actor_rollout_ref.rollout.mode": "sync"}
# verl 0.9 lists these as empty mappings; hybridrl keeps verl 0.5's sub-keys in them, at verl 0.5's defaults.
KEPT_05_SUBKEYS = {
    "actor_rollout_ref.rollout.engine_kwargs.vllm",
    "actor_rollout_ref.rollout.engine_kwargs.sglang",
    "actor_rollout_ref.model.override_config",
    "critic.model.override_config",
}


@functools.cache
def _tsv(version: str, name: str) -> dict[str, object]:
    folder = FIXTURES if version == "0.9" else REFERENCE
    rows = {}
    for line in (folder / f"verl-{version}-{name}-keys.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split("\t", 1)
            rows[key] = _as_omegaconf_reads(ast.literal_eval(value))  # None/True/False, numbers, strings, lists, {}
    return rows


def _as_omegaconf_reads(value: object) -> object:
    """The TSV was written with PyYAML, which reads `1e-5` as a string; OmegaConf (verl's loader) reads a float."""
    if isinstance(value, str) and re.fullmatch(r"[-+]?[0-9.]+[eE][-+]?[0-9]+", value):
        loaded = OmegaConf.create(f"v: {value}")["v"]
        assert isinstance(loaded, float)
        return loaded
    return value


def _verl_keys(name: str) -> set[str]:
    keys = set(_tsv("0.5", name))
    return keys | set(_tsv("0.9", name)) if name in TRAINERS else keys


@functools.cache
def _as_run(name: str) -> dict[str, object]:
    """The flat default tree as the trainer runs it (the Megatron file filled from ppo_trainer.yaml)."""
    tree = load_config(name)
    if name == "ppo_megatron_trainer":
        tree = OmegaConf.merge(OmegaConf.create(to_plain(load_config("ppo_trainer"))), tree)
    return flatten_keys(tree)


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_key_set_is_verl_plus_allowlisted_additions(name):
    verl_keys = _verl_keys(name)
    plain = to_plain(load_config(name))
    ours = set(flatten_keys(plain))
    additions = allowed_additions(name)
    assert not (additions & verl_keys), f"allow-listed keys that verl already has: {sorted(additions & verl_keys)}"
    assert [k for k in sorted(_tsv("0.5", name)) if not has_key(plain, k)] == [], "verl 0.5 keys missing"
    assert sorted(ours - verl_keys - additions) == [], "keys not in verl and not on configs/additions_allowlist.txt"
    assert sorted(additions - ours) == [], "allow-listed keys missing from the YAML"


@pytest.mark.parametrize(("name", "key"), [(name, key) for name in TRAINERS for key in _tsv("0.9", name)])
def test_every_verl_09_key_holds_its_verl_09_default(name, key):
    """Each key of verl 0.9's list is in the tree as run, with verl 0.9's default."""
    defaults = _as_run(name)
    kept = {k: v for k, v in defaults.items() if k.startswith(f"{key}.")}
    if key in KEPT_05_SUBKEYS and kept:
        assert all(_tsv("0.5", name).get(k, "absent") == v for k, v in kept.items()), kept
        return
    deviations = {**DEVIATIONS, **(FSDP_DEVIATIONS if name == "ppo_trainer" else MEGATRON_DEVIATIONS)}
    expected = deviations.get(key, _tsv("0.9", name)[key])
    assert (defaults.get(key), type(defaults.get(key))) == (expected, type(expected))


@pytest.mark.parametrize("name", TRAINERS)
def test_every_verl_09_key_is_accepted_on_the_command_line(name):
    """One compose with every key of the list set to its own default (``+`` added where verl writes it)."""
    from hybridrl.config import compose_config

    verl = _tsv("0.9", name)
    plain = to_plain(load_config(name))
    overrides = [f"{key}={_cli(value)}" for key, value in verl.items() if key not in KEPT_05_SUBKEYS]
    config = compose_config(name, overrides)
    flat = flatten_keys(with_defaults(config))
    assert [key for key in verl if key not in KEPT_05_SUBKEYS and key not in flat] == []
    assert has_key(plain, "model_engine")


def _cli(value: object) -> str:
    """A Hydra override value that composes back to ``value`` (interpolations quoted)."""
    if isinstance(value, str):
        return "'" + value.replace("'", "\\'") + "'"
    return (
        "null" if value is None else str(value).replace("'", "") if not isinstance(value, bool) else str(value).lower()
    )


@pytest.mark.parametrize("name", [n for n in CONFIG_NAMES if n not in TRAINERS])
def test_defaults_equal_verl_05(name):
    ours = flatten_keys(load_config(name))
    mismatches = []
    for key, verl_value in _tsv("0.5", name).items():
        value = ours[key]
        if value != verl_value or type(value) is not type(verl_value):
            mismatches.append(f"{key}: ours {value!r} verl {verl_value!r}")
    assert mismatches == []


@pytest.mark.parametrize("name", TRAINERS)
def test_verl_05_keys_dropped_by_09_keep_their_05_defaults(name):
    ours = _as_run(name)
    dropped = {k: v for k, v in _tsv("0.5", name).items() if k not in _tsv("0.9", name) and k in ours}
    assert [f"{k}: {ours[k]!r} != {v!r}" for k, v in dropped.items() if ours[k] != v] == []


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


def test_deviation_and_additions_are_what_the_yaml_says():
    config = load_config("ppo_trainer")
    assert config.actor_rollout_ref.actor.strategy == "fsdp2"
    assert config.critic.strategy == "fsdp2"
    resolved = OmegaConf.to_container(with_defaults(config), resolve=True)
    # verl reads these with config.get(key, default); the YAML carries the same defaults.
    assert resolved["data"]["seed"] == 1
    assert resolved["data"]["gen_batch_size"] == resolved["data"]["train_batch_size"] == 1024
    assert resolved["actor_rollout_ref"]["actor"]["policy_loss"]["loss_mode"] == "vanilla"
    assert resolved["algorithm"]["filter_groups"]["enable"] is False
    # verl-style interpolations resolve the same way.
    assert resolved["critic"]["ppo_mini_batch_size"] == 256
    assert resolved["actor_rollout_ref"]["actor"]["checkpoint"]["load_contents"] == ["model", "optimizer", "extra"]
    # verl 0.9's reward section feeds the keys the trainer reads (verl 0.5's names, null by default in 0.9)
    assert resolved["reward_model"]["reward_manager"] == "naive"
    assert resolved["custom_reward_function"]["name"] == "compute_score"


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
