"""Check Hydra command-line overrides against the YAML tree before Hydra composes it.

Hydra's struct mode rejects an unknown key with a bare "Key 'x' is not in struct"; this module names
the key and the closest valid one instead. It also accepts verl-style ``+key=value`` for the keys
that hybridrl lists in its YAML but verl only reads with ``config.get`` (the allow-listed additions),
so verl command lines that add those keys keep working.
"""

from __future__ import annotations

from typing import Any

from hybridrl.config.errors import ConfigError, ConfigProblem
from hybridrl.config.loading import allowed_additions, flatten_keys, has_key, to_plain
from hybridrl.config.suggest import unknown_key_fix
from hybridrl.utils.config_files import load_config


def split_cli_overrides(argv: list[str]) -> tuple[list[str], bool]:
    """The positional ``key=value`` overrides of a Hydra command line (flags like ``--cfg job`` dropped),
    and whether the command line picks another config (``--config-name/-path/-dir``, as recipes do)."""
    try:
        from hydra._internal.utils import get_args_parser

        args = get_args_parser().parse_known_args(argv)[0]
        other = any(getattr(args, name, None) for name in ("config_name", "config_path", "config_dir"))
        return list(args.overrides), other
    except Exception:  # noqa: BLE001 - Hydra internals moved: fall back to a plain scan
        other = any(a.startswith(("--config-", "-cn", "-cp", "-cd")) for a in argv)
        return [a for a in argv if "=" in a and not a.startswith("-")], other


# A shipped config whose missing keys take another's defaults (the trainer fills them: ``with_defaults``): an
# override of such a key is added (``+key=value``) instead of refused.
DEFAULTS_FROM = {"ppo_megatron_trainer": "ppo_trainer"}


def _shipped_config_selected(argv: list[str]) -> str | None:
    """The shipped config that ``--config-name`` picks (``ppo_megatron_trainer``), or None (a recipe's, or none)."""
    try:
        from hydra._internal.utils import get_args_parser

        args = get_args_parser().parse_known_args(argv)[0]
    except Exception:  # noqa: BLE001 - Hydra internals moved: leave the command line to Hydra
        return None
    if args.config_path or args.config_dir or args.config_name not in DEFAULTS_FROM:
        return None
    return str(args.config_name)


def prepare_cli_argv(argv: list[str], config_name: str = "ppo_trainer") -> list[str]:
    """``argv`` with allow-listed ``+key=`` rewritten; raises ConfigError for unknown keys.

    ``--config-name ppo_megatron_trainer`` is checked against that YAML (keys it lacks but ``ppo_trainer`` has
    are added); a command line that selects another config (a recipe's YAML) is left to Hydra unchanged.
    """
    overrides, other_config = split_cli_overrides(argv)
    selected = _shipped_config_selected(argv) if other_config else None
    if other_config and selected is None:
        return list(argv)
    config_name = selected or config_name
    rewritten = dict(zip(overrides, prepare_overrides(overrides, config_name)))
    return [rewritten.get(arg, arg) for arg in argv]


def prepare_overrides(overrides: list[str], config_name: str = "ppo_trainer") -> list[str]:
    """Validate override keys against ``<config_name>.yaml`` and rewrite ``+`` on allow-listed keys.

    Returns the overrides to hand to Hydra. Raises ConfigError listing every unknown key.
    """
    parsed = _parse(overrides)
    if parsed is None:  # a syntax error: let Hydra report it in its own words
        return list(overrides)
    plain = to_plain(load_config(config_name))
    valid_keys = set(flatten_keys(plain))
    additions = allowed_additions(config_name)
    base = to_plain(load_config(DEFAULTS_FROM[config_name])) if config_name in DEFAULTS_FROM else {}
    problems: list[ConfigProblem] = []
    result: list[str] = []
    for text, override in zip(overrides, parsed):
        if _from_base(override, plain, base):
            result.append(f"+{text}")  # a key of the base config this one lacks: added with the user's value
            continue
        result.append(_check_one(text, override, plain, valid_keys, additions, problems))
    if problems:
        raise ConfigError(problems)
    return result


def _from_base(override: Any, plain: dict, base: dict) -> bool:
    """A plain ``key=value`` whose key the config lacks and its base config (:data:`DEFAULTS_FROM`) has."""
    from hydra.core.override_parser.types import OverrideType

    key = override.key_or_group
    return override.type == OverrideType.CHANGE and not has_key(plain, key) and has_key(base, key)


def _check_one(text: str, override: Any, plain: dict, valid_keys: set[str], additions: set[str], problems: list) -> str:
    """Check one parsed override; append a problem if its key is unknown; return its final text."""
    from hydra.core.override_parser.types import OverrideType

    key = override.key_or_group
    if override.package is not None or key.startswith("hydra.") or key == "hydra":
        return text
    if override.type == OverrideType.ADD:
        return text[1:] if key in additions and has_key(plain, key) else text
    if override.type in (OverrideType.CHANGE, OverrideType.DEL) and not has_key(plain, key):
        what = "deletes" if override.type == OverrideType.DEL else "sets"
        problems.append(
            ConfigProblem(
                key=key,
                message=f"unknown key: the override {text!r} {what} a key that is not in the config.",
                fix=unknown_key_fix(key, valid_keys, text if override.type == OverrideType.CHANGE else None),
            )
        )
    return text


def _parse(overrides: list[str]) -> list[Any] | None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(overrides=list(overrides))
    except Exception:  # noqa: BLE001 - Hydra reports syntax errors itself
        return None
