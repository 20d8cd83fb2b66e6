"""Name → reward manager class (``reward_model.reward_manager``), as verl's ``@register(name)``."""

from __future__ import annotations

from collections.abc import Callable

REWARD_MANAGER_REGISTRY: dict[str, type] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator adding a reward manager under ``name`` (re-registering the same class is a no-op)."""

    def decorator(cls: type) -> type:
        existing = REWARD_MANAGER_REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(f"reward manager {name!r} is already registered to {existing.__qualname__}")
        REWARD_MANAGER_REGISTRY[name] = cls
        return cls

    return decorator


def get_reward_manager_cls(name: str) -> type:
    """The class registered as ``name``; error lists the known names."""
    if name not in REWARD_MANAGER_REGISTRY:
        raise ValueError(
            f"Unknown reward manager: {name!r} (reward_model.reward_manager). Known: {sorted(REWARD_MANAGER_REGISTRY)}"
        )
    return REWARD_MANAGER_REGISTRY[name]
