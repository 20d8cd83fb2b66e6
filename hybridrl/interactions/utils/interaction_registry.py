"""Build interactions from verl's interaction YAML (``multi_turn.interaction_config_path``).

verl's format::

    interaction:
      - name: gsm8k                                                  # optional; default from the class name
        class_name: hybridrl.interactions.gsm8k_interaction.Gsm8kInteraction   # "verl." reads as "hybridrl."
        config: {}

Each class is called as ``cls(config=<config dict with "name" set>)``. Without ``name``, the class name
lower-cased without an ``Interaction`` suffix is used (``Gsm8kInteraction`` → ``gsm8k``), as in verl.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.interactions.base import BaseInteraction
from hybridrl.tools.class_path import import_class_path
from hybridrl.tools.config_file import read_entry_list

__all__ = ["get_interaction_class", "initialize_interactions_from_config"]

_CLASS_SUFFIX = "Interaction"


def get_interaction_class(cls_name: str) -> type:
    """The class at the dotted path ``cls_name`` (``verl.`` prefix read as ``hybridrl.``)."""
    return import_class_path(cls_name, where="interaction class", base=BaseInteraction)


def initialize_interactions_from_config(interaction_config_file: str) -> dict[str, BaseInteraction]:
    """``{name: interaction}`` for every entry of the YAML file's ``interaction`` list.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unreadable YAML, no ``interaction`` list, a bad entry or a duplicate name (the message
            names the file and the entry).
    """
    interactions: dict[str, BaseInteraction] = {}
    for index, entry in enumerate(_read_entries(interaction_config_file)):
        where = f"interaction[{index}] of {interaction_config_file}"
        name, interaction = _build_interaction(entry, where)
        if name in interactions:
            raise ValueError(f"{where}: duplicate interaction name '{name}'; each interaction needs a unique name")
        interactions[name] = interaction
    return interactions


def default_interaction_name(class_name: str) -> str:
    """``pkg.Gsm8kInteraction`` → ``gsm8k``; ``pkg.MyUser`` → ``myuser``."""
    simple = class_name.rsplit(".", 1)[-1]
    return (simple[: -len(_CLASS_SUFFIX)] if simple.endswith(_CLASS_SUFFIX) else simple).lower()


def _read_entries(path: str) -> list[Any]:
    return read_entry_list(
        path,
        kind="interaction",
        config_key="multi_turn.interaction_config_path",
        list_key="interaction",
        entry_shape="{name, class_name, config}",
    )


def _build_interaction(entry: Any, where: str) -> tuple[str, BaseInteraction]:
    if not isinstance(entry, DictConfig) or "class_name" not in entry:
        raise ValueError(f"{where}: each entry needs `class_name` (and optional `name`, `config`), got {entry!r}")
    interaction_class = import_class_path(entry.class_name, where, base=BaseInteraction)
    config = OmegaConf.to_container(entry.config, resolve=True) if entry.get("config") is not None else {}
    if not isinstance(config, dict):
        raise ValueError(f"{where}: `config` must be a mapping, got {config!r}")
    name = entry.get("name") or default_interaction_name(entry.class_name)
    config["name"] = name
    try:
        return name, interaction_class(config=config)
    except Exception as exc:
        raise ValueError(f"{where}: {entry.class_name}(config=...) raised {exc!r}") from exc
