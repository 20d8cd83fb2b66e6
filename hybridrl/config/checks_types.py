"""Type checks: a value whose type cannot be what its key means, named with the type the YAML default implies.

Hydra parses every override, so ``custom_reward_function.name=nan`` arrives as the float NaN (and failed
deep inside the reward loader with "attribute name must be string"), ``data.prompt_key=1`` as an int and
``actor_rollout_ref.actor.use_kl_loss=ture`` as a (truthy) string. The expected type is the type of the key's
default in ``configs/ppo_trainer.yaml``; only unambiguous mismatches are problems:

    default is a string   value is a number or a boolean       (labels such as trainer.experiment_name excepted)
    default is a boolean  value is a string or a float

Null defaults, lists, dicts and ``${...}`` interpolations are not checked (their type is open). Numeric keys are
not checked here: some take strings too (``rollout_correction.rollout_is_threshold="0.5_5.0"``), YAML writes
``1`` for ``1.0``; the learning rates have their own check (checks_optim).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from omegaconf import DictConfig

from hybridrl.config.errors import ConfigProblem
from hybridrl.config.loading import flatten_keys
from hybridrl.utils.config_files import load_config

__all__ = ["check_value_types"]

# Free-text labels: a number is a fine name for a project or an experiment (it becomes part of a path).
LABEL_KEYS = frozenset({"trainer.project_name", "trainer.experiment_name"})


@lru_cache(maxsize=4)
def _defaults(config_name: str) -> dict[str, Any]:
    return flatten_keys(load_config(config_name))


def check_value_types(config: DictConfig, config_name: str = "ppo_trainer") -> list[ConfigProblem]:
    """One problem per key of ``config`` whose value's type contradicts the default of ``<config_name>.yaml``."""
    defaults = _defaults(config_name)
    problems: list[ConfigProblem] = []
    for key, value in flatten_keys(config).items():
        if key not in defaults or key in LABEL_KEYS or _is_interpolation(value):
            continue
        expected = _expected_type(defaults[key], value)
        if expected is not None:
            problems.append(ConfigProblem(
                key, f"expected {expected}, got {type(value).__name__} {value!r}.",
                _fix(key, expected, value),
            ))
    return problems


def _is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def _expected_type(default: Any, value: Any) -> str | None:
    """The expected type's name when ``value`` contradicts ``default``'s type, else None."""
    if isinstance(default, str) and not default.startswith("${"):
        return "a string" if isinstance(value, (bool, int, float)) else None
    if isinstance(default, bool):
        return "a boolean (True/False)" if isinstance(value, (str, float)) else None
    return None


def _fix(key: str, expected: str, value: Any) -> str:
    if expected == "a string":
        # Hydra reads nan, inf, 1e3, true, 123 as numbers/booleans; quoting keeps the text
        return f"quote the value so Hydra keeps it as text: {key}=\"'{value}'\"."
    return f"set {key}=True or {key}=False."
