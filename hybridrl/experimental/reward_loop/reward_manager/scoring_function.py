"""Reading the reward loop's settings from a config in either spelling, and loading the user's scoring function."""

from __future__ import annotations

import functools
from typing import Any

from omegaconf import OmegaConf


def select_setting(config: Any, keys: tuple[str, ...]) -> Any:
    """The first of ``keys`` (dotted) that is set in ``config`` (verl 0.5's spelling first: a resolved config
    holds the value there; a hand-built one may only have verl 0.9's)."""
    for key in keys:
        value = OmegaConf.select(config, key, default=None) if OmegaConf.is_config(config) else None
        if value is not None:
            return value
    return None


def load_compute_score(config: Any) -> Any:
    """The user's ``compute_score`` (verl 0.5 or 0.9 keys) with ``custom_reward_function.reward_kwargs`` bound,
    or None for the default one."""
    from hybridrl.utils.import_utils import load_extern_type

    path = select_setting(config, ("custom_reward_function.path", "reward.custom_reward_function.path"))
    if not path:
        return None
    name = select_setting(config, ("custom_reward_function.name", "reward.custom_reward_function.name"))
    name = name or "compute_score"
    fn = load_extern_type(path, name, key="custom_reward_function.path")
    if not callable(fn):
        raise TypeError(f"custom_reward_function.name={name!r} in {path} is not callable")
    kwargs = select_setting(config, ("custom_reward_function.reward_kwargs",)) or {}
    return functools.partial(fn, **kwargs)  # a partial, not a closure: it pickles by reference
