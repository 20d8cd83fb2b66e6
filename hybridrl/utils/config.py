"""``omega_conf_to_dataclass``: a config section (DictConfig or dict) to a typed config dataclass, as in verl.

Two ways, as verl 0.6+ does them::

    omega_conf_to_dataclass(cfg.actor_rollout_ref.actor, FSDPActorConfig)   # the class given: merge onto its defaults
    omega_conf_to_dataclass({"_target_": "hybridrl.workers.config.FSDPActorConfig", ...})  # the class named inside

Given a class, the section (its interpolations resolved against the tree it belongs to) is merged onto the class's
defaults (which come from the shipped YAML, see
:mod:`hybridrl.base_config`), so keys the section lacks keep their defaults and a key the class does not have is an
error naming it. Without a class, ``_target_`` is required and Hydra's ``instantiate`` builds the object, nested
``_target_`` sections first; a ``_target_`` into verl (``verl.workers.config.FSDPActorConfig``, as verl's YAML writes
it) builds hybridrl's class of the same path.
"""

from __future__ import annotations

from dataclasses import is_dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

__all__ = ["omega_conf_to_dataclass"]


VERL_PACKAGE = "verl."


def _with_hybridrl_targets(config: Any) -> Any:
    """A copy of ``config`` whose ``_target_`` paths into verl (``verl.workers.config.FSDPActorConfig``, as verl's
    YAML and saved configs write them) name the same class in hybridrl; other targets are kept."""
    if isinstance(config, (DictConfig, ListConfig)):
        config = OmegaConf.to_container(config, resolve=True)
    if isinstance(config, list):
        return [_with_hybridrl_targets(item) for item in config]
    if not isinstance(config, dict):
        return config
    converted = {key: _with_hybridrl_targets(value) for key, value in config.items()}
    target = converted.get("_target_")
    if isinstance(target, str) and target.startswith(VERL_PACKAGE):
        converted["_target_"] = "hybridrl." + target[len(VERL_PACKAGE) :]
    return converted


def omega_conf_to_dataclass(config: DictConfig | dict, dataclass_type: type | None = None) -> Any:
    """Build a config dataclass from ``config``.

    Args:
        config: a DictConfig or dict section; an object that is neither is returned as it is (already built).
        dataclass_type: the dataclass to build; None: the section's ``_target_`` names it.

    Returns:
        The dataclass instance (``dataclass_type()`` for an empty section; None for an empty section and no type).

    Raises:
        ValueError: ``dataclass_type`` is not a dataclass, or no type is given and the section has no ``_target_``.
        omegaconf.errors.ConfigKeyError: the section has a key the dataclass lacks.
    """
    if not config:
        return None if dataclass_type is None else dataclass_type()
    if not isinstance(config, (DictConfig, ListConfig, dict, list)):
        return config
    if dataclass_type is None:
        if "_target_" not in config:
            raise ValueError(
                "omega_conf_to_dataclass: pass dataclass_type, or give the section a _target_ naming the class "
                f"(e.g. _target_: hybridrl.workers.config.FSDPActorConfig); got keys {sorted(config.keys())}"
            )
        from hydra.utils import instantiate

        return instantiate(_with_hybridrl_targets(config), _convert_="partial")
    if not is_dataclass(dataclass_type):
        raise ValueError(f"{dataclass_type} must be a dataclass")
    if isinstance(config, DictConfig):
        # a section of a full tree: resolve its interpolations (``${oc.select:actor_rollout_ref.model....}``)
        # against that tree while it is still attached, not against the detached copy
        config = OmegaConf.to_container(config, resolve=True)
    merged = OmegaConf.merge(OmegaConf.structured(dataclass_type), OmegaConf.create(config))
    return OmegaConf.to_object(merged)
