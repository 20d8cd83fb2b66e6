"""Name → reward manager class (``reward_model.reward_manager``), as verl's ``@register(name)``."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["REWARD_MANAGER_REGISTRY", "get_reward_manager_cls", "register"]

REWARD_MANAGER_REGISTRY: dict[str, type] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator adding a reward manager under ``name`` (re-registering the same class is a no-op)."""

    def decorator(cls: type) -> type:
        existing = REWARD_MANAGER_REGISTRY.get(name)
        if existing is not None and existing is not cls:  # verl's wording
            raise ValueError(f"Reward manager {name} has already been registered: {existing} vs {cls}")
        REWARD_MANAGER_REGISTRY[name] = cls
        return cls

    return decorator


def get_reward_manager_cls(name: str) -> type:
    """The class registered as ``name``; error lists the known names."""
    if name not in REWARD_MANAGER_REGISTRY:
        # "Unknown reward manager: <name>" is verl's wording (user code matches on it)
        raise ValueError(
            f"Unknown reward manager: {name} (reward_model.reward_manager). Known: {sorted(REWARD_MANAGER_REGISTRY)}"
        )
    return REWARD_MANAGER_REGISTRY[name]
