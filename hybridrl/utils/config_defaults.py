"""Fill the keys a config lacks from the shipped YAML, once, where a config enters the program.

A config may predate a key (a YAML saved from an older version, a section built in Python by user code, a
verl config): the entry points (the CLI, ``RayPPOTrainer``, the SFT trainer) and the public constructors
verl users call (the workers, the datasets) pass it through here, so the rest of the code reads every YAML
key by attribute (``cfg.actor.clip_ratio_c``) and never restates a default.

    with_defaults(config)                                  full tree:  YAML ⊕ user (user wins), verl 0.9 aliases resolved
    section_with_defaults(section, "actor_rollout_ref")    one section, resolved and detached, aliases resolved

A filled config is marked (a flag on each of its OmegaConf nodes, kept by copies, merges and pickling), so the next constructor it reaches does not merge the YAML again:
``with_defaults`` returns a filled tree as it is, ``section_with_defaults`` only resolves and detaches a
filled section. Inner classes (``DataParallelPPOActor``, the rollout factory, ...) take filled configs.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.utils.config_aliases import resolve_aliases
from hybridrl.utils.config_files import load_config

__all__ = ["is_filled", "section_with_defaults", "tree_with_section", "with_defaults"]


@functools.cache
def _shipped(name: str) -> DictConfig:
    """``configs/<name>.yaml`` as loaded (cached: callers take a copy)."""
    return load_config(name)


def _shipped_copy(name: str) -> DictConfig:
    tree = copy.deepcopy(_shipped(name))
    OmegaConf.set_struct(tree, False)
    return tree


def _flag(path: str, name: str) -> str:
    return f"hybridrl_filled:{name}:{path}"


def _mark(config: DictConfig, path: str, name: str) -> DictConfig:
    """Flag ``config`` as filled at dotted ``path`` of ``<name>.yaml``, and each of its sections at theirs (a
    section replaced later is a new node, without the flag)."""
    config._set_flag(_flag(path, name), True)
    for key in config.keys():
        child = config._get_node(key)
        if isinstance(child, DictConfig):
            _mark(child, f"{path}.{key}" if path else str(key), name)
    return config


def is_filled(config: Any, path: str = "", name: str = "ppo_trainer") -> bool:
    """Whether ``config`` already has every key of the section at dotted ``path`` of ``<name>.yaml`` (``""``: the
    whole tree): it came out of :func:`with_defaults` / :func:`section_with_defaults`, or is a copy or a section
    of what did. The ``ref`` section of a filled tree is filled as ``actor_rollout_ref.ref``, not as the actor."""
    return isinstance(config, DictConfig) and bool(config._get_node_flag(_flag(path, name)))


def with_defaults(config: DictConfig | Mapping[str, Any], name: str = "ppo_trainer") -> DictConfig:
    """The whole tree with every key of ``<name>.yaml`` it lacks filled in (struct mode, as Hydra composes).

    Values the user set win; keys the YAML does not have are kept; interpolations stay unresolved. A tree
    filled before is returned as it is.
    """
    if is_filled(config, "", name):
        return config  # type: ignore[return-value]
    merged = OmegaConf.merge(_shipped_copy(name), config)
    assert isinstance(merged, DictConfig)
    resolve_aliases(merged)  # verl 0.9's new homes of settings, read here under their 0.5 names
    OmegaConf.set_struct(merged, True)
    return _mark(merged, "", name)


def tree_with_section(section: Any, path: str, name: str = "ppo_trainer") -> DictConfig:
    """The shipped tree of ``<name>.yaml`` (not struct) with ``section`` merged in at dotted ``path``, resolved,
    verl 0.9's aliases resolved (a hand-built section in either spelling means what it means in verl 0.9)."""
    values = OmegaConf.to_container(section, resolve=True) if isinstance(section, DictConfig) else dict(section)
    tree = _shipped_copy(name)
    OmegaConf.update(tree, path, values, merge=True)
    return resolve_aliases(tree)


def section_with_defaults(section: Any, path: str, name: str = "ppo_trainer") -> DictConfig:
    """The section at dotted ``path`` of ``<name>.yaml``, overlaid with ``section``: resolved, detached, writable.

    Args:
        section: the user's section (a DictConfig node of a full tree, a bare DictConfig or a dict).
        path: where the section lives in the YAML, e.g. ``"actor_rollout_ref"`` or ``"critic"``.
        name: the config file.

    Interpolations of the section resolve against the user's tree when ``section`` is part of one, and
    the keys it lacks take their YAML values (interpolated against the shipped defaults of other sections).
    A filled section (:func:`is_filled`) has no key to take: it is only resolved and detached.
    """
    filled_before = is_filled(section, path, name)
    node = section if filled_before else OmegaConf.select(tree_with_section(section, path, name), path)
    filled = OmegaConf.create(OmegaConf.to_container(node, resolve=True))
    assert isinstance(filled, DictConfig)
    return _mark(filled, path, name)
