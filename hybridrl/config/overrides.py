"""Check Hydra command-line overrides against the YAML tree before Hydra composes it.

Hydra's struct mode rejects an unknown key with a bare "Key 'x' is not in struct"; this module names
the key and the closest valid one instead. It also accepts verl-style ``+key=value`` for a key the YAML
already lists (one verl reads with ``config.get``, or one an older verl lacked and its command lines add):
the value is set, so those command lines keep working where Hydra would refuse to add an existing key.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from hybridrl.config.errors import ConfigError, ConfigProblem
from hybridrl.config.loading import flatten_keys, has_key, to_plain
from hybridrl.config.suggest import unknown_key_fix
from hybridrl.utils.config_files import config_file, load_config


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

# verl 0.9's Hydra group ``model_engine``: the option a command line picks -> the shipped config it selects.
MODEL_ENGINE_CONFIGS = {"dp": "ppo_trainer", "fsdp": "ppo_trainer", "megatron": "ppo_megatron_trainer"}
# Options of the group whose training engine hybridrl does not have (verl 0.9 ships them).
MODEL_ENGINES_LACKED = {
    "mindspeed": "the MindSpeed (Ascend NPU) engine",
    "torchtitan": "the TorchTitan engine",
    "veomni": "the VeOmni engine",
    "automodel": "the NeMo AutoModel engine",
}
# ``--config-path`` values of verl's example scripts that name verl's own config folder (``verl/trainer/config``),
# which is hybridrl's shipped ``configs/`` folder.
VERL_CONFIG_PATHS = ("config", "./config", "config/", "./config/")


def select_model_engine(config_name: str, overrides: list[str]) -> str:
    """The shipped config a ``model_engine=<option>`` override selects (verl 0.9's group), or ``config_name``.

    ``model_engine=megatron`` picks ``ppo_megatron_trainer``, ``model_engine=dp`` ``ppo_trainer``; an engine hybridrl
    lacks is a ConfigError naming it. Only the two trainer configs have the group; others are returned as given.
    """
    if config_name not in MODEL_ENGINE_CONFIGS.values():
        return config_name
    for text in overrides:
        key, _, option = text.lstrip("+").partition("=")
        if key != "model_engine":
            continue
        option = option.strip("'\"")
        if option in MODEL_ENGINES_LACKED:
            raise ConfigError(
                [
                    ConfigProblem(
                        "model_engine",
                        f"{option!r} selects {MODEL_ENGINES_LACKED[option]}, which hybridrl does not implement.",
                        "use model_engine=dp (FSDP) or model_engine=megatron.",
                    )
                ]
            )
        if option not in MODEL_ENGINE_CONFIGS:
            known = ", ".join(sorted(MODEL_ENGINE_CONFIGS))
            raise ConfigError([ConfigProblem("model_engine", f"unknown engine {option!r}.", f"use one of {known}.")])
        config_name = MODEL_ENGINE_CONFIGS[option]
    return config_name


def _parsed_args(argv: list[str]) -> object | None:
    try:
        from hydra._internal.utils import get_args_parser

        return get_args_parser().parse_known_args(argv)[0]
    except Exception:  # noqa: BLE001 - Hydra internals moved: leave the command line to Hydra
        return None


def _shipped_config_selected(argv: list[str]) -> str | None:
    """The shipped trainer config that ``--config-name`` picks (``ppo_megatron_trainer``, or ``ppo_trainer`` with
    verl's ``--config-path=config``), or None (a recipe's config, or none). ``.yaml`` may end the name, as in verl."""
    args = _parsed_args(argv)
    if args is None or args.config_dir or args.config_path not in (None, *VERL_CONFIG_PATHS):
        return None
    name = (args.config_name or "ppo_trainer").removesuffix(".yaml")
    return name if name in MODEL_ENGINE_CONFIGS.values() else None


def _without_config_flags(argv: list[str]) -> list[str]:
    """``argv`` without its ``--config-name``/``--config-path`` flags (both ``--flag=v`` and ``--flag v``)."""
    flags = ("--config-name", "-cn", "--config-path", "-cp")
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        elif not arg.startswith(tuple(f"{flag}=" for flag in flags)):
            kept.append(arg)
    return kept


def prepare_cli_argv(argv: list[str], config_name: str = "ppo_trainer") -> list[str]:
    """``argv`` with allow-listed ``+key=`` rewritten; raises ConfigError for unknown keys.

    ``--config-name ppo_megatron_trainer`` (or ``model_engine=megatron``, verl 0.9's group) is checked against that
    YAML (keys it lacks but ``ppo_trainer`` has are added) and selects it; verl's ``--config-path=config`` names the
    shipped folder. A command line that selects another config (a recipe's YAML) is left to Hydra unchanged.
    """
    overrides, other_config = split_cli_overrides(argv)
    selected = _shipped_config_selected(argv) if other_config else None
    if other_config and selected is None:
        return list(argv)
    chosen = select_model_engine(selected or config_name, overrides)
    rewritten = dict(zip(overrides, prepare_overrides(overrides, chosen)))
    argv = [rewritten.get(arg, arg) for arg in argv]
    if chosen == (selected or config_name) and not _needs_path_rewrite(argv):
        return argv
    return [f"--config-name={chosen}", *_without_config_flags(argv)]


def _needs_path_rewrite(argv: list[str]) -> bool:
    args = _parsed_args(argv)
    return args is not None and (args.config_path is not None or str(args.config_name or "").endswith(".yaml"))


def prepare_overrides(overrides: list[str], config_name: str = "ppo_trainer") -> list[str]:
    """Validate override keys against ``<config_name>.yaml`` and rewrite ``+`` on keys it lists.

    Returns the overrides to hand to Hydra. Raises ConfigError listing every unknown key.
    """
    parsed = _parse(overrides)
    if parsed is None:  # a syntax error: let Hydra report it in its own words
        return list(overrides)
    plain = _plain_tree(config_file(config_name))
    valid_keys = set(flatten_keys(plain))
    base = _plain_tree(config_file(DEFAULTS_FROM[config_name])) if config_name in DEFAULTS_FROM else {}
    problems: list[ConfigProblem] = []
    result: list[str] = []
    added: set[str] = set()
    for text, override in zip(overrides, parsed):
        if _from_base(override, plain, base):
            # a key of the base config this one lacks: added with the user's value (once: a repeat changes it)
            result.append(text if override.key_or_group in added else f"+{text}")
            added.add(override.key_or_group)
            continue
        result.append(_check_one(text, override, plain, valid_keys, problems))
    if problems:
        raise ConfigError(problems)
    return result


@functools.cache
def _plain_tree(path: Path) -> dict[str, Any]:
    """The shipped tree at ``path`` as plain dicts, parsed once per process (the YAML of verl 0.9's surface takes
    ~0.2 s to parse, and every composition checks its overrides against it); read here, never modified."""
    return to_plain(load_config(path.stem))


def _from_base(override: Any, plain: dict, base: dict) -> bool:
    """A plain ``key=value`` whose key the config lacks and its base config (:data:`DEFAULTS_FROM`) has."""
    from hydra.core.override_parser.types import OverrideType

    key = override.key_or_group
    return override.type == OverrideType.CHANGE and not has_key(plain, key) and has_key(base, key)


def _check_one(text: str, override: Any, plain: dict, valid_keys: set[str], problems: list) -> str:
    """Check one parsed override; append a problem if its key is unknown; return its final text."""
    from hydra.core.override_parser.types import OverrideType

    key = override.key_or_group
    if override.package is not None or key.startswith("hydra.") or key == "hydra":
        return text
    if override.type == OverrideType.ADD:
        return text[1:] if has_key(plain, key) else text  # ``+`` on a listed key: set it
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
