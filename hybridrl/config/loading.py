"""Read the YAML trees with OmegaConf; flatten them to dotted keys.

Python never restates a default: every value comes from ``configs/<name>.yaml``. Composing with
overrides, as the command line does, is ``hybridrl.config.entry.compose_config``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.utils.config_files import ADDITIONS_FILE, config_dir


def to_plain(config: DictConfig) -> dict[str, Any]:
    """The tree as plain dicts/lists with interpolations left as ``${...}`` strings."""
    plain = OmegaConf.to_container(config, resolve=False)
    assert isinstance(plain, dict)
    return {str(key): value for key, value in plain.items()}


def flatten_keys(tree: DictConfig | dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Map every leaf's dotted key to its unresolved value.

    Leaves are scalars, lists and empty dicts (``override_config: {}``), as in verl's key lists.
    """
    plain = to_plain(tree) if isinstance(tree, DictConfig) else tree
    flat: dict[str, Any] = {}
    for key, value in plain.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten_keys(value, prefix=f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


_NOT_THERE = object()


def plain_value(plain: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """The unresolved value (leaf or section) at ``dotted`` of the plain tree, or ``default`` where there is none."""
    node: Any = plain
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def has_key(plain: dict[str, Any], dotted: str) -> bool:
    """Whether ``dotted`` names a node (leaf or section) of the plain tree."""
    return plain_value(plain, dotted, _NOT_THERE) is not _NOT_THERE


def allowed_additions(name: str = "ppo_trainer") -> set[str]:
    """Dotted keys of ``<name>.yaml`` that verl 0.5 does not list (``configs/additions_allowlist.txt``)."""
    keys: set[str] = set()
    for line in _read_lines(config_dir() / ADDITIONS_FILE):
        config_name, key = line.split()[:2]
        if config_name == name:
            keys.add(key)
    return keys


def _read_lines(path: Any) -> Iterable[str]:
    with open(path, encoding="utf-8") as handle:
        for raw in handle:
            line = raw.split("#", 1)[0].strip()
            if line:
                yield line
