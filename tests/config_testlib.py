"""Configs for tests, composed from the shipped YAML (``hybridrl/configs/*.yaml``) — never written by hand.

    compose_config("ppo_trainer", ["data.train_batch_size=16", ...])   the tree main_ppo sees after load
    compose_section("actor_rollout_ref.actor", ppo_epochs=2)          one section, as a worker holds it

A test that needs a section of a shipped config asks for it here, so its defaults are the YAML's and a key
renamed or removed in the YAML fails the test instead of living on in a hand-written dict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.config import compose_config as _compose

__all__ = ["compose_config", "compose_section"]


def compose_config(name: str = "ppo_trainer", overrides: Sequence[str] = ()) -> DictConfig:
    """``configs/<name>.yaml`` composed with Hydra-syntax dotted overrides, exactly as the CLI loads it."""
    return _compose(name, list(overrides))


def _has_key(node: DictConfig, dotted: str) -> bool:
    """Whether ``node`` lists the dotted key, a mandatory one (``???``, e.g. ``rollout.name``) included."""
    parent_path, _, leaf = dotted.rpartition(".")
    parent = OmegaConf.select(node, parent_path, default=None) if parent_path else node
    return isinstance(parent, DictConfig) and leaf in parent.keys()


def compose_section(
    section: str, overrides: Sequence[str] = (), /, config_name: str = "ppo_trainer", **values: Any
) -> DictConfig:
    """The section at dotted path ``section`` of the composed config: detached, resolved and writable.

    Args:
        section: e.g. ``"actor_rollout_ref.actor"`` or ``"algorithm"``.
        overrides: Hydra-syntax overrides with full dotted keys (they may touch other sections, whose
            values interpolations of this section follow, e.g. ``actor_rollout_ref.rollout.n=4``).
        config_name: the config file (``ppo_trainer``, ``sft_trainer``, ...).
        values: keys *relative to the section* with Python values (nested keys dotted via ``__``, e.g.
            ``policy_loss__loss_mode="clip_cov"``), applied after composing. Each key must exist in the YAML.

    Raises:
        KeyError: a ``values`` key that the section does not have (a typo, or a key the YAML lacks).
    """
    config = compose_config(config_name, overrides)
    node = OmegaConf.select(config, section)
    if not isinstance(node, DictConfig):
        raise KeyError(f"{config_name}.yaml has no section {section!r}")
    detached = OmegaConf.create(OmegaConf.to_container(node, resolve=True))
    for key, value in values.items():
        dotted = key.replace("__", ".")
        if not _has_key(detached, dotted):
            raise KeyError(f"{section}.{dotted} is not a key of {config_name}.yaml")
        OmegaConf.update(detached, dotted, value, merge=isinstance(value, dict))  # a dict updates its keys
    return detached
