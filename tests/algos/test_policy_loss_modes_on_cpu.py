"""loss_mode → bound pure loss; the verl 4-tuple adapter for user-registered losses only."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from config_testlib import compose_section
from omegaconf import OmegaConf

from hybridrl.algos import policy_losses
from hybridrl.algos.params import policy_loss_params
from hybridrl.algos.policy_loss_modes import (
    BUILTIN_LOSS_MODES,
    bind_policy_loss,
    call_verl_style_loss,
    resolve_policy_loss,
)
from hybridrl.trainer.ppo import core_algos

ATOL = 1e-6
LN = math.log

# four tokens: (A, ρ) = (1, 1.5), (1, 0.5), (−1, 1.5), (−1, 5)
ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
LOGP = torch.tensor([[LN(1.5), LN(0.5), LN(1.5), LN(5.0)]])
OLD = torch.zeros(1, 4)
MASK = torch.ones(1, 4)


def actor_config(**overrides):
    """The shipped actor section with the hyper-parameters these hand-computed cases use."""
    values = {
        "clip_ratio": 0.2,
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.2,
        "clip_ratio_c": 3.0,
        "loss_agg_mode": "token-mean",
        "policy_loss__loss_mode": "vanilla",
        "policy_loss__clip_cov_ratio": 1.0,  # every candidate token detached: deterministic
        "policy_loss__clip_cov_lb": 1.0,
        "policy_loss__clip_cov_ub": 5.0,
        "policy_loss__kl_cov_ratio": 0.0002,
        "policy_loss__ppo_kl_coef": 0.1,
        "policy_loss__dro_beta": 0.5,
        **overrides,
    }
    return compose_section("actor_rollout_ref.actor", **values)


@pytest.mark.parametrize("mode", BUILTIN_LOSS_MODES)
def test_bound_pure_loss_equals_the_verl_adapter(mode):
    cfg = actor_config()
    loss, metrics = resolve_policy_loss(mode, cfg, "seq-mean-token-sum")(OLD, LOGP, ADV, MASK)
    verl_loss, verl_metrics = core_algos.get_policy_loss_fn(mode)(OLD, LOGP, ADV, MASK, "seq-mean-token-sum", cfg)
    torch.testing.assert_close(loss, verl_loss)
    assert set(metrics) == set(verl_metrics)  # the adapter reports the pure loss's metrics, as floats
    for key, value in metrics.items():
        assert value.item() == pytest.approx(verl_metrics[key], abs=1e-6)


def test_built_in_mode_resolves_to_the_pure_function_with_bound_hyper_parameters():
    loss_fn = resolve_policy_loss("vanilla", actor_config(clip_ratio_high=0.28), "token-mean")
    assert isinstance(loss_fn, functools.partial) and loss_fn.func is policy_losses.ppo_clip_loss
    assert loss_fn.keywords == {
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.28,
        "clip_ratio_c": 3.0,
        "loss_agg_mode": "token-mean",
    }  # loss_scale_factor null: left to the function's default


def test_null_keys_fall_back_as_verl():
    # clip_ratio_low/high null → clip_ratio; clip_ratio_c absent → the function's 3.0
    cfg = OmegaConf.create({"clip_ratio": 0.3, "clip_ratio_low": None, "clip_ratio_high": None})
    params = policy_loss_params(cfg, "token-mean")
    assert (params.clip_ratio_low, params.clip_ratio_high, params.clip_ratio_c) == (0.3, 0.3, None)
    loss, metrics = bind_policy_loss("vanilla", params)(OLD, LOGP, ADV, MASK)
    # t0: max(−1.5, −1.3) = −1.3; t1: max(−0.5, −0.7) = −0.5; t2: 1.5; t3: min(3, 5) = 3 → (−1.3 − 0.5 + 1.5 + 3)/4
    assert loss.item() == pytest.approx(0.675, abs=ATOL)
    assert metrics["actor/pg_clipfrac_lower"].item() == pytest.approx(0.25)


def test_unknown_mode_and_missing_clip_ratio_are_clear_errors():
    with pytest.raises(ValueError, match="Unsupported loss mode: ppo2"):
        resolve_policy_loss("ppo2", actor_config(), "token-mean")
    with pytest.raises(ValueError, match="clip_ratio"):
        bind_policy_loss("gspo", policy_loss_params(None, "token-mean"))
    # GPG takes no clip ratio: a missing config is fine
    loss, _ = bind_policy_loss("gpg", policy_loss_params(None, "token-mean"))(OLD, LOGP, ADV, MASK)
    assert loss.requires_grad is False


def _user_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None):
    """A verl 0.5-style user loss: −A·ρ without clipping; ρ > 1.2 counted as "clipped"."""
    ratio = torch.exp(log_prob - old_log_prob)
    loss = core_algos.agg_loss(-advantages * ratio, response_mask, loss_agg_mode)
    clipfrac = ((ratio > 1 + config.clip_ratio) * response_mask).sum() / response_mask.sum()
    return loss, clipfrac, torch.tensor(0.5), torch.tensor(0.25)


@pytest.fixture
def registered_user_loss():
    core_algos.register_policy_loss("test_user_loss")(_user_loss)
    yield "test_user_loss"
    core_algos.POLICY_LOSS_REGISTRY.pop("test_user_loss")


def test_user_registered_verl_style_loss_goes_through_the_four_tuple_adapter(registered_user_loss):
    loss_fn = resolve_policy_loss(registered_user_loss, actor_config(), "token-mean")
    loss, metrics = loss_fn(OLD, LOGP, ADV, MASK)
    # −A·ρ = [−1.5, −0.5, 1.5, 5] → mean 1.125; ρ > 1.2 for t0, t2, t3 → 0.75
    assert loss.item() == pytest.approx(1.125, abs=ATOL)
    assert {key: value.item() for key, value in metrics.items()} == {
        "actor/pg_clipfrac": 0.75,
        "actor/ppo_kl": 0.5,
        "actor/pg_clipfrac_lower": 0.25,
    }


def test_a_user_override_of_a_built_in_name_wins():
    original = core_algos.get_policy_loss_fn("cispo")
    core_algos.register_policy_loss("cispo")(_user_loss)
    try:
        loss, _ = resolve_policy_loss("cispo", actor_config(), "token-mean")(OLD, LOGP, ADV, MASK)
        assert loss.item() == pytest.approx(1.125, abs=ATOL)
    finally:
        core_algos.POLICY_LOSS_REGISTRY["cispo"] = original


def test_later_verl_dict_style_is_accepted():
    def dict_style(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config):
        return (-advantages).mean(), {"actor/pg_clipfrac": 0.5}

    loss, metrics = call_verl_style_loss(dict_style, OLD, LOGP, ADV, MASK, "token-mean", None)
    assert loss.item() == 0.0 and metrics["actor/pg_clipfrac"].item() == 0.5
