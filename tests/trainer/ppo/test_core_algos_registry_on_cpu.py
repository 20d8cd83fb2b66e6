"""verl API parity of the core_algos registries: they are module globals of core_algos, looked up at call time.

Mirrors verl 0.5's ``tests/trainer/ppo/test_core_algos_on_cpu.py::TestRegisterAdvEst``, which rebinds
``core_algos.ADV_ESTIMATOR_REGISTRY`` to a fresh dict and expects ``register_adv_est`` /
``get_adv_estimator_fn`` to use the new one; the same for the policy-loss registry. Every test restores
the real registries (verl's own tests leave them cleared).
"""

from __future__ import annotations

from enum import Enum

import pytest
import torch

from hybridrl.algos import policy_loss_modes
from hybridrl.trainer.ppo import core_algos
from hybridrl.trainer.ppo.core_algos import (
    get_adv_estimator_fn,
    get_policy_loss_fn,
    register_adv_est,
    register_policy_loss,
)


def _mock_estimator():
    pass


@pytest.fixture
def rebound_adv_registry(monkeypatch):
    """verl's setUp: the registry cleared, then rebound to a dict with two toy entries."""
    saved = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    core_algos.ADV_ESTIMATOR_REGISTRY.clear()
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", {"gae": lambda x: x * 2, "vtrace": lambda x: x + 1})
    yield core_algos.ADV_ESTIMATOR_REGISTRY
    monkeypatch.undo()
    core_algos.ADV_ESTIMATOR_REGISTRY.update(saved)


def test_register_into_a_rebound_registry(rebound_adv_registry):
    @register_adv_est("test_estimator")
    def test_fn():
        pass

    assert rebound_adv_registry["test_estimator"] is test_fn


def test_register_with_any_enum(rebound_adv_registry):
    class Estimator(Enum):
        TEST = "test_enum_estimator"

    @register_adv_est(Estimator.TEST)
    def test_fn():
        pass

    assert rebound_adv_registry["test_enum_estimator"] is test_fn


def test_duplicate_registration(rebound_adv_registry):
    register_adv_est("duplicate_test")(_mock_estimator)
    register_adv_est("duplicate_test")(_mock_estimator)  # the same function twice: fine
    assert rebound_adv_registry["duplicate_test"] is _mock_estimator
    with pytest.raises(ValueError):
        register_adv_est("duplicate_test")(lambda: None)


def test_decorator_returns_the_function_and_counts(rebound_adv_registry):
    before = len(rebound_adv_registry)
    decorated = register_adv_est("preserve_test")(lambda: "original")
    register_adv_est("estimator2")(lambda: None)
    assert decorated() == "original"
    assert len(rebound_adv_registry) == before + 2


def test_get_reads_the_rebound_registry(rebound_adv_registry):
    assert get_adv_estimator_fn("gae")(5) == 10  # 5 · 2
    assert get_adv_estimator_fn("vtrace")(5) == 6  # 5 + 1
    with pytest.raises(ValueError) as err:
        get_adv_estimator_fn("invalid_name")
    assert "Unknown advantage estimator simply: invalid_name" in str(err.value)  # verl's wording
    with pytest.raises(ValueError):
        get_adv_estimator_fn("GAE")  # case-sensitive
    with pytest.raises(ValueError):
        get_adv_estimator_fn("grpo")  # the built-in registry is not consulted any more


def test_cleared_adv_registry_is_seen_and_restored():
    saved = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    core_algos.ADV_ESTIMATOR_REGISTRY.clear()
    try:
        with pytest.raises(ValueError):
            get_adv_estimator_fn("grpo")
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.update(saved)
    assert get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage


def test_policy_loss_registry_rebound_and_cleared(monkeypatch):
    def toy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None):
        zero = torch.zeros(())
        return zero, zero, zero, zero

    monkeypatch.setattr(core_algos, "POLICY_LOSS_REGISTRY", {"toy": toy_loss})
    assert get_policy_loss_fn("toy") is toy_loss
    with pytest.raises(ValueError) as err:
        get_policy_loss_fn("vanilla")
    assert "Unsupported loss mode: vanilla" in str(err.value)  # verl's wording
    register_policy_loss("toy2")(toy_loss)
    assert core_algos.POLICY_LOSS_REGISTRY == {"toy": toy_loss, "toy2": toy_loss}
    monkeypatch.undo()
    assert "toy2" not in core_algos.POLICY_LOSS_REGISTRY
    assert get_policy_loss_fn("vanilla") is core_algos.compute_policy_loss_vanilla

    saved = dict(core_algos.POLICY_LOSS_REGISTRY)
    core_algos.POLICY_LOSS_REGISTRY.clear()
    try:
        with pytest.raises(ValueError):
            get_policy_loss_fn("vanilla")
    finally:
        core_algos.POLICY_LOSS_REGISTRY.update(saved)


def test_policy_loss_registry_is_the_dict_the_actor_reads():
    # a loss registered through core_algos reaches the actor, which imports only hybridrl.algos
    assert core_algos.POLICY_LOSS_REGISTRY is policy_loss_modes.POLICY_LOSS_REGISTRY
    assert set(policy_loss_modes.BUILTIN_LOSS_MODES) <= set(core_algos.POLICY_LOSS_REGISTRY)


def test_policy_loss_re_registration_replaces_as_verl():
    original = get_policy_loss_fn("gpg")
    try:
        register_policy_loss("gpg")(_mock_estimator)
        assert get_policy_loss_fn("gpg") is _mock_estimator
    finally:
        core_algos.POLICY_LOSS_REGISTRY["gpg"] = original


def test_verl_adapters_keep_verl_names_and_signature():
    import inspect

    for mode in policy_loss_modes.BUILTIN_LOSS_MODES:
        fn = get_policy_loss_fn(mode)
        assert fn is getattr(core_algos, f"compute_policy_loss_{mode}")
        assert fn.__name__ == f"compute_policy_loss_{mode}"
        assert list(inspect.signature(fn).parameters) == [
            "old_log_prob",
            "log_prob",
            "advantages",
            "response_mask",
            "loss_agg_mode",
            "config",
            "rollout_is_weights",
        ]  # verl 0.9's signature
