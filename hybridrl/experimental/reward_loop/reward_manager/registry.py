"""Name -> reward-loop manager class (``reward.reward_manager.name``), verl 0.9's ``@register(name)``.

A separate table from :mod:`hybridrl.workers.reward_manager.registry` (the driver's managers), as in verl.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["REWARD_MANAGER", "get_reward_manager_cls", "register"]

REWARD_MANAGER: dict[str, type] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator adding a reward-loop manager under ``name`` (re-registering the same class is a no-op)."""

    def decorator(cls: type) -> type:
        if name in REWARD_MANAGER and REWARD_MANAGER[name] is not cls:  # verl's wording
            raise ValueError(f"reward manager {name} has already been registered: {REWARD_MANAGER[name]} vs {cls}")
        REWARD_MANAGER[name] = cls
        return cls

    return decorator


def get_reward_manager_cls(name: str) -> type:
    """The class registered as ``name``; the error starts with verl's wording and lists the known names."""
    if name not in REWARD_MANAGER:
        raise ValueError(
            f"Unknown reward manager: {name} (reward.reward_manager.name). Known: {sorted(REWARD_MANAGER)}"
        )
    return REWARD_MANAGER[name]
