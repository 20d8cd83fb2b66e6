"""Compose a recipe's Hydra config (``defaults: [ppo_trainer, _self_]``) the way its entry point does.

Recipe YAMLs only change values of ``ppo_trainer`` keys, so overrides are checked against ``ppo_trainer``'s key
set (unknown key → the closest valid one), then Hydra composes the recipe YAML found in ``config_dir``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from hybridrl.config import prepare_overrides
from hybridrl.utils.config_aliases import resolve_aliases

__all__ = ["DAPO_CONFIG_DIR", "compose_recipe_config"]

DAPO_CONFIG_DIR = Path(__file__).resolve().parent / "dapo" / "config"


def compose_recipe_config(config_dir: str | Path, config_name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The composed recipe config, e.g. ``compose_recipe_config(DAPO_CONFIG_DIR, "dapo_trainer", ["k=v"])``.

    verl 0.9's aliases are resolved, as for the shipped configs (:func:`hybridrl.config.compose_config`).

    Raises:
        ConfigError: an override names a key ``ppo_trainer.yaml`` does not have.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    checked = prepare_overrides(list(overrides), "ppo_trainer")
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with warnings.catch_warnings():  # pkg://hybridrl.configs loads, though Hydra calls the namespace package unavailable
        warnings.filterwarnings("ignore", message=r"provider=hydra\.searchpath.*is not available")
        with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base=None):
            return resolve_aliases(compose(config_name=config_name, overrides=checked))
