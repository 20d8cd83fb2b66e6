"""The reward-manager registry keeps verl's names and error wording (user code matches on it)."""

from __future__ import annotations

import pytest

from hybridrl.workers.reward_manager import NaiveRewardManager
from hybridrl.workers.reward_manager.registry import REWARD_MANAGER_REGISTRY, get_reward_manager_cls, register


@pytest.fixture()
def registry():
    """A scratch registry; the shipped managers are put back afterwards."""
    saved = dict(REWARD_MANAGER_REGISTRY)
    REWARD_MANAGER_REGISTRY.clear()
    REWARD_MANAGER_REGISTRY.update({"manager1": "Manager1Class", "manager2": "Manager2Class"})
    yield REWARD_MANAGER_REGISTRY
    REWARD_MANAGER_REGISTRY.clear()
    REWARD_MANAGER_REGISTRY.update(saved)


def test_lookup_is_exact_and_case_sensitive(registry):
    assert get_reward_manager_cls("manager1") == "Manager1Class"
    for name in ("unknown_manager", "MANAGER1", "Manager1"):
        with pytest.raises(ValueError, match=f"Unknown reward manager: {name}"):
            get_reward_manager_cls(name)
    registry.clear()
    with pytest.raises(ValueError, match="Unknown reward manager: any_manager"):
        get_reward_manager_cls("any_manager")


def test_register_returns_the_class_and_refuses_a_second_class(registry):
    @register("first")
    class First:
        def method(self):
            return 42

    assert First().method() == 42 and registry["first"] is First
    assert register("first")(First) is First  # the same class again is fine

    with pytest.raises(ValueError, match="Reward manager first has already been registered"):

        @register("first")
        class Second:
            pass

    assert registry["first"] is First


def test_shipped_managers_are_registered():
    assert get_reward_manager_cls("naive") is NaiveRewardManager
    assert {"naive", "batch", "dapo", "prime"} <= set(REWARD_MANAGER_REGISTRY)
