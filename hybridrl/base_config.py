"""``BaseConfig``: verl's dict-like config dataclass, and the decorator that takes its defaults from the YAML.

verl ≥ 0.6 users build typed configs (``ActorConfig(...)``, ``omega_conf_to_dataclass(cfg.actor)``) and read them
like dicts (``cfg.get("clip_ratio")``, ``cfg["strategy"]``, ``list(cfg)``). hybridrl keeps one source of truth for
defaults, the shipped YAML (``hybridrl/configs/ppo_trainer.yaml``): :func:`yaml_dataclass` turns a class into a
keyword-only dataclass whose field defaults are read from the YAML section at a dotted path when the module is
imported, so a default is never written twice::

    @yaml_dataclass("actor_rollout_ref.actor.optim")
    class FSDPOptimizerConfig(OptimizerConfig):
        optimizer: str = "AdamW"   # used only while the YAML has no optim.optimizer key
        lr: float                  # default: the YAML's actor_rollout_ref.actor.optim.lr

A default written in the class body is a fallback for a verl field the YAML does not hold; as soon as the YAML has
the key, its value wins (``tests/test_base_config_on_cpu.py`` checks every field against the YAML).
"""

import collections.abc
import copy
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError, dataclass, field, fields, is_dataclass
from typing import Any

from omegaconf import OmegaConf

__all__ = ["BaseConfig", "yaml_dataclass", "yaml_section"]

MANDATORY = "???"  # OmegaConf's mark of a value the user must give


@dataclass
class BaseConfig(collections.abc.Mapping):
    """A dataclass readable as a read-only mapping of its fields.

    Fields are frozen once set, except those a class lists in ``_mutable_fields`` (as in verl: batch sizes the
    worker normalises, the engine / model configs attached later). ``_target_`` names the class for Hydra's
    ``instantiate`` (see :func:`hybridrl.utils.config.omega_conf_to_dataclass`).
    """

    _mutable_fields = frozenset()
    _target_: str = ""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__ and name not in type(self)._mutable_fields:
            raise FrozenInstanceError(f"Field '{name}' is frozen and cannot be modified")
        super().__setattr__(name, value)

    def get(self, key: str, default: Any = None) -> Any:
        """The field ``key``, or ``default`` when there is no such field."""
        return getattr(self, key, default)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __iter__(self):
        return (f.name for f in fields(self))

    def __len__(self) -> int:
        return len(fields(self))


# ---------------------------------------------------------------- the YAML as the source of defaults


@functools.cache
def _resolved_tree(config_name: str) -> dict:
    from hybridrl.utils.config_files import load_config

    return OmegaConf.to_container(load_config(config_name), resolve=True)  # type: ignore[return-value]


def yaml_section(path: str, config_name: str = "ppo_trainer") -> dict | None:
    """The resolved section at dotted ``path`` of ``<config_name>.yaml`` (a copy), None when absent."""
    node: Any = _resolved_tree(config_name)
    for key in path.split(".") if path else ():
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return copy.deepcopy(node) if isinstance(node, dict) else None


def _config_class(annotation: Any) -> type | None:
    """The BaseConfig subclass an annotation names (``X`` or ``Optional[X]``), else None."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        annotation = members[0] if len(members) == 1 else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseConfig) else None


def build_nested(config_class: type, values: dict) -> Any:
    """``config_class`` from a YAML mapping, nested config fields built the same way.

    Keys the class has no field for are left out: a base class (``OptimizerConfig``) built from a section written
    for its subclasses (``actor.optim``). The YAML-equality test catches a key a leaf class would lose.
    """
    known = {f.name: f for f in fields(config_class)}
    kwargs = {}
    for name, value in values.items():
        if name not in known:
            continue
        nested = _config_class(known[name].type)
        kwargs[name] = build_nested(nested, value) if nested is not None and isinstance(value, dict) else value
    return config_class(**kwargs)


def _field_for(value: Any, annotation: Any) -> Any:
    """The dataclass ``field`` whose default is the YAML ``value`` (a factory for containers and configs); the
    YAML's ``???`` (a key the user must set, e.g. ``rollout.name``) makes a required field."""
    if value == MANDATORY:
        return field()
    config_class = _config_class(annotation)
    if config_class is not None and isinstance(value, dict):
        return field(default_factory=functools.partial(build_nested, config_class, value))
    if isinstance(value, (dict, list)):
        return field(default_factory=functools.partial(copy.deepcopy, value))
    return field(default=value)


def _inherited_fields(cls: type) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for base in reversed(cls.__mro__[1:]):
        if is_dataclass(base):
            found.update({f.name: f.type for f in fields(base)})
    return found


def yaml_dataclass(path: str, config_name: str = "ppo_trainer", extra_keys: bool = False) -> Callable[[type], type]:
    """Make ``cls`` a keyword-only dataclass with the defaults of the YAML section at dotted ``path``.

    Args:
        path: where the section lives in ``<config_name>.yaml`` (e.g. ``"actor_rollout_ref.actor"``).
        config_name: the shipped YAML file.
        extra_keys: also add the section's keys the class does not declare, typed ``Any`` (so that a whole
            section of hybridrl's tree converts; leaf classes use it, verl's base classes do not).

    Declared and inherited fields found in the section take the YAML value as default; the others keep the
    class-body default (a field with neither is a required keyword). ``cls._yaml_fields`` records which fields
    the YAML backs, ``cls._yaml_source`` where from.
    """

    def wrap(cls: type) -> type:
        section = yaml_section(path, config_name) or {}
        annotations = dict(cls.__dict__.get("__annotations__", {}))
        inherited = _inherited_fields(cls)
        backed = []
        for name, value in section.items():
            if name in annotations or name in inherited:
                annotations.setdefault(name, inherited.get(name, Any))
            elif extra_keys:
                annotations[name] = Any
            else:
                continue
            setattr(cls, name, _field_for(value, annotations[name]))
            backed.append(name)
        cls.__annotations__ = annotations
        cls._yaml_source = (config_name, path)
        cls._yaml_fields = frozenset(backed)
        cls._yaml_extra_keys = extra_keys
        return dataclass(kw_only=True)(cls)

    return wrap


def field_defaults(config_class: type) -> dict[str, Any]:
    """Each field's default value (factories called), ``MISSING`` for required fields."""
    defaults = {}
    for item in fields(config_class):
        if item.default is not MISSING:
            defaults[item.name] = item.default
        elif item.default_factory is not MISSING:
            defaults[item.name] = item.default_factory()
        else:
            defaults[item.name] = MISSING
    return defaults
