"""Reading verl's tool / interaction YAML files: a top-level list of entries, with errors naming file and key."""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = ["read_entry_list"]


def read_entry_list(path: str, *, kind: str, config_key: str, list_key: str, entry_shape: str) -> list[Any]:
    """The entries of ``path``'s top-level ``list_key:`` list.

    Args:
        kind: what the file is, for messages (``tool``, ``interaction``).
        config_key: the config key that named the file (``multi_turn.tool_config_path``).
        entry_shape: the keys an entry has, for the message of a malformed file (``{class_name, config}``).

    Raises:
        FileNotFoundError: no such file. ValueError: not YAML, or no top-level list under ``list_key``.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{kind} config file '{path}' not found ({config_key})")
    try:
        content = OmegaConf.load(path)
    except Exception as exc:
        raise ValueError(f"{kind} config file '{path}' is not valid YAML: {exc}") from exc
    entries = content.get(list_key) if isinstance(content, DictConfig) else None
    if entries is None or isinstance(entries, (str, DictConfig)):
        raise ValueError(f"{kind} config file '{path}' needs a top-level `{list_key}:` list of {entry_shape}")
    return list(entries)
