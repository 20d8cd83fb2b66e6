"""Policy losses: hand-computed values and gradients, properties, registry contract."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from config_testlib import compose_section

from hybridrl.algos import policy_losses
from hybridrl.trainer.ppo import core_algos
from hybridrl.trainer.ppo.core_algos import LOSS_AGG_MODES, agg_loss, get_policy_loss_fn

ATOL = 1e-5
LN = math.log


def actor_config(**overrides):
    """The shipped actor section (verl 0.5's defaults for the keys the losses read); ``policy_loss`` merges."""
    return compose_section("actor_rollout_ref.actor", **overrides)


_METRIC_NAMES = ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower")


def as_tuple(result):
    """verl 0.9's ``(loss, {name: float})`` → ``(loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``; a metric the
    loss does not report (verl 0.9's gpg, clip_cov, kl_cov) reads 0."""
    loss, metrics = result
    assert all(isinstance(value, float) for value in metrics.values())  # verl 0.9 reports plain floats
    return (loss, *(torch.tensor(metrics.get(name, 0.0)) for name in _METRIC_NAMES))


def loss_of(name):
    """The registered loss ``name``, its result as :func:`as_tuple`'s 4-tuple."""
    return lambda *args: as_tuple(get_policy_loss_fn(name)(*args))


# ---------------------------------------------------------------------------
# vanilla PPO
# ---------------------------------------------------------------------------

# four tokens: (A, ρ) = (1, 1.5), (1, 0.5), (−1, 1.5), (−1, 5)
VANILLA_ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
VANILLA_LOGP = torch.tensor([[LN(1.5), LN(0.5), LN(1.5), LN(5.0)]])
VANILLA_OLD = torch.zeros(1, 4)
ONES = torch.ones(1, 4)


def test_vanilla_hand_computed():
    loss, clipfrac, ppo_kl, clipfrac_lower = loss_of("vanilla")(
        VANILLA_OLD, VANILLA_LOGP, VANILLA_ADV, ONES, "token-mean", actor_config()
    )
    # t0: L1 = −1.5, L2 = −1·1.2 = −1.2 → max −1.2 (clipped)
    # t1: L1 = −0.5, L2 = −1·0.8 = −0.8 → max −0.5
    # t2: L1 = 1.5,  L2 = 1.2           → max 1.5; dual min(3·1, 1.5) = 1.5
    # t3: L1 = 5,    L2 = 1.2           → max 5;   dual min(3, 5) = 3 (lower-clipped)
    # token-mean = (−1.2 − 0.5 + 1.5 + 3)/4 = 0.7
    assert loss.item() == pytest.approx(0.7, abs=ATOL)
    assert clipfrac.item() == pytest.approx(0.25, abs=ATOL)  # only t0 has L2 > L1
    assert clipfrac_lower.item() == pytest.approx(0.25, abs=ATOL)  # only t3
    # ppo_kl = mean(old − new) = −(ln1.5 + ln0.5 + ln1.5 + ln5)/4 = −0.431805
    assert ppo_kl.item() == pytest.approx(-0.431805, abs=ATOL)


def test_vanilla_clip_higher_is_asymmetric():
    cfg = actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28)
    loss, *_ = loss_of("vanilla")(VANILLA_OLD, VANILLA_LOGP, VANILLA_ADV, ONES, "token-mean", cfg)
    # only t0 changes: L2 = −1·1.28 → (−1.28 − 0.5 + 1.5 + 3)/4 = 0.68
    assert loss.item() == pytest.approx(0.68, abs=ATOL)
    # the low side: A = −1, ρ = 0.5 → L1 = 0.5, L2 = 1·(1 − ε_low): ε_low = 0.2 → 0.8, ε_low = 0.4 → 0.6
    old, logp, adv, mask = torch.zeros(1, 1), torch.tensor([[LN(0.5)]]), -torch.ones(1, 1), torch.ones(1, 1)
    for low, expected in ((0.2, 0.8), (0.4, 0.6)):
        loss, *_ = loss_of("vanilla")(old, logp, adv, mask, "token-mean", actor_config(clip_ratio_low=low))
        assert loss.item() == pytest.approx(expected, abs=ATOL)


def test_vanilla_falls_back_to_clip_ratio():
    cfg = {"clip_ratio": 0.1, "clip_ratio_low": None, "clip_ratio_high": None}
    loss, *_ = loss_of("vanilla")(VANILLA_OLD, VANILLA_LOGP, VANILLA_ADV, ONES, "token-mean", cfg)
    # ε = 0.1: t0 → −1.1; t1 → −0.5; t2 → 1.5; t3 → 3  → (−1.1 − 0.5 + 1.5 + 3)/4 = 0.725
    assert loss.item() == pytest.approx(0.725, abs=ATOL)


def test_vanilla_gradient_hand_computed():
    logp = VANILLA_LOGP.clone().requires_grad_(True)
    loss, *_ = loss_of("vanilla")(VANILLA_OLD, logp, VANILLA_ADV, ONES, "token-mean", actor_config())
    loss.backward()
    # unclipped tokens: d(−Aρ)/dlogπ = −Aρ; clipped tokens (t0 by ε, t3 by dual clip): 0; /4 for token-mean
    # t1: −1·0.5/4 = −0.125; t2: 1·1.5/4 = 0.375
    assert logp.grad[0].tolist() == pytest.approx([0.0, -0.125, 0.375, 0.0], abs=ATOL)


def test_vanilla_rejects_bad_dual_clip_and_missing_config():
    with pytest.raises(AssertionError, match="clip_ratio_c"):
        loss_of("vanilla")(
            VANILLA_OLD, VANILLA_LOGP, VANILLA_ADV, ONES, "token-mean", actor_config(clip_ratio_c=1.0)
        )
    with pytest.raises(ValueError, match="clip_ratio"):
        loss_of("vanilla")(VANILLA_OLD, VANILLA_LOGP, VANILLA_ADV, ONES, "token-mean", None)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_ratio_one_gives_minus_aggregated_advantage(mode):
    gen = torch.Generator().manual_seed(0)
    adv = torch.randn(5, 7, generator=gen)
    logp = -torch.rand(5, 7, generator=gen)
    mask = (torch.rand(5, 7, generator=gen) > 0.3).float()
    mask[:, 0] = 1
    loss, clipfrac, ppo_kl, lower = loss_of("vanilla")(logp, logp, adv, mask, mode, actor_config())
    torch.testing.assert_close(loss, agg_loss(-adv, mask, mode))
    assert clipfrac.item() == 0 and ppo_kl.item() == 0 and lower.item() == 0


def test_dual_clip_bound_holds():
    gen = torch.Generator().manual_seed(1)
    adv = -torch.rand(200, 1, generator=gen) * 3  # A < 0
    logp = torch.randn(200, 1, generator=gen) * 4  # ratios from e^−12 to e^12
    old = torch.zeros(200, 1)
    c = 3.0
    for i in range(200):
        loss, _ = policy_losses.ppo_clip_loss(
            old[i : i + 1], logp[i : i + 1], adv[i : i + 1], torch.ones(1, 1), 0.2, 0.2, c
        )
        # L ≤ −A·c for every negative-advantage token
        assert loss.item() <= (-adv[i, 0] * c).item() + 1e-6


def test_log_ratio_clamp_keeps_loss_finite():
    old = torch.tensor([[0.0, 0.0]])
    logp = torch.tensor([[200.0, -200.0]])  # e^200 would overflow fp32
    adv = torch.tensor([[-1.0, 1.0]])
    loss, _ = policy_losses.ppo_clip_loss(old, logp, adv, torch.ones(1, 2), 0.2, 0.2, 3.0)
    # t0: ρ = e^20 → dual-clipped at 3; t1: ρ = e^−20 ≈ 0 → max(−ρ, −0.8) ≈ −2e−9 → mean ≈ 1.5
    assert math.isfinite(loss.item())
    assert loss.item() == pytest.approx(1.5, abs=1e-6)
    assert policy_losses.LOG_RATIO_CLAMP == 20.0


# ---------------------------------------------------------------------------
# GSPO, GPG, CISPO, GMPO
# ---------------------------------------------------------------------------


def test_gspo_hand_computed_value_and_gradient():
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    logp = torch.tensor([[LN(2.0), 0.0]], requires_grad=True)
    # log s = (ln2 + 0)/2 → s = sqrt(2) = 1.41421 on both tokens
    loss, clipfrac, ppo_kl, lower = loss_of("gspo")(
        old, logp, torch.ones(1, 2), mask, "token-mean", actor_config()
    )
    # A = 1: max(−1.41421, −1.2) = −1.2 on both tokens (clipped) → seq-mean-token-mean −1.2
    assert loss.item() == pytest.approx(-1.2, abs=ATOL)
    assert clipfrac.item() == pytest.approx(1.0) and lower.item() == 0.0
    assert ppo_kl.item() == pytest.approx(-LN(2.0) / 2, abs=ATOL)  # −0.346574
    # GSPO always aggregates seq-mean-token-mean, whatever loss_agg_mode says (as verl)
    loss, *_ = loss_of("gspo")(old, logp, -torch.ones(1, 2), mask, "seq-mean-token-sum", actor_config())
    # A = −1: max(1.41421, 1.2) = 1.41421 (unclipped); d/dlogπ_t = −A·s / 2 tokens = 0.707107 each
    assert loss.item() == pytest.approx(math.sqrt(2), abs=ATOL)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([math.sqrt(2) / 2] * 2, abs=ATOL)


def test_gpg_hand_computed():
    logp = torch.tensor([[-1.0, -2.0]])
    adv = torch.tensor([[1.0, -0.5]])
    loss, clipfrac, ppo_kl, lower = loss_of("gpg")(logp, logp, adv, torch.ones(1, 2), "token-mean", None)
    # L = −logπ·A = [1, −1] → mean 0
    assert loss.item() == pytest.approx(0.0, abs=ATOL)
    assert clipfrac.item() == ppo_kl.item() == lower.item() == 0.0


def test_cispo_hand_computed_value_and_gradient():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[LN(1.5), LN(0.5)]], requires_grad=True)
    loss, clipfrac, _, _ = loss_of("cispo")(
        old, logp, torch.ones(1, 2), torch.ones(1, 2), "token-mean", actor_config()
    )
    # sg(clip(ρ)) = [1.2, 0.8]; L = −[1.2·ln1.5, 0.8·ln0.5] = [−0.486558, 0.554518] → mean 0.033980
    assert loss.item() == pytest.approx(0.033980, abs=ATOL)
    assert clipfrac.item() == pytest.approx(1.0)
    loss.backward()
    # gradient only through logπ: −sg(clip ρ)·A/2 = [−0.6, −0.4]
    assert logp.grad[0].tolist() == pytest.approx([-0.6, -0.4], abs=ATOL)


def test_geo_mean_hand_computed():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[0.5, -0.1]])
    mask = torch.ones(1, 2)
    loss, clipfrac, _, lower = loss_of("geo_mean")(
        old, logp, torch.ones(1, 2), mask, "token-mean", actor_config()
    )
    # A > 0: δ = [0.5, −0.1], clip(δ, −0.2, 0.2) = [0.2, −0.1], min → [0.2, −0.1]
    # R = exp((0.2 − 0.1)/2) = e^0.05 = 1.051271, Ā = 1 → loss = −1.051271
    assert loss.item() == pytest.approx(-1.051271, abs=ATOL)
    assert clipfrac.item() == pytest.approx(0.5) and lower.item() == 0.0
    loss, clipfrac, _, lower = loss_of("geo_mean")(
        old, logp, -torch.ones(1, 2), mask, "token-mean", actor_config()
    )
    # A < 0: sign·min(−δ, −clip δ) = −min([−0.5, 0.1], [−0.2, 0.1]) = [0.5, −0.1] → R = e^0.2 = 1.221403 → loss 1.221403
    assert loss.item() == pytest.approx(1.221403, abs=ATOL)
    assert clipfrac.item() == 0.0 and lower.item() == pytest.approx(0.5)


# ---------------------------------------------------------------------------
# Clip-Cov, KL-Cov
# ---------------------------------------------------------------------------

COV_ADV = torch.tensor([[3.0, -3.0, 0.0, 0.0]])


def test_clip_cov_detaches_one_high_covariance_token():
    logp = torch.tensor([[-0.5, -1.5, -1.0, -1.0]], requires_grad=True)
    old = logp.detach().clone()  # ρ = 1: no PPO clipping
    # mean A = 0, mean logπ = −1 → cov = [3·0.5, −3·−0.5, 0, 0] = [1.5, 1.5, 0, 0]: two tokens in (1, 5)
    # k = max(⌊2e−4·4⌋, 1) = 1 → one of t0/t1 detached; per-token −A·1 = [−3, 3, 0, 0]
    loss, clipfrac, _, _ = as_tuple(core_algos.compute_policy_loss_clip_cov(
        old, logp, COV_ADV, torch.ones(1, 4), "token-mean", actor_config()
    ))
    assert abs(loss.item()) == pytest.approx(0.75, abs=ATOL)  # ±3/4
    assert clipfrac.item() == pytest.approx(0.25)
    loss.backward()
    assert (logp.grad[0, :2] == 0).sum().item() == 1  # exactly one of the two lost its gradient
    # clip_cov_ratio = 1 → k = 4 ≥ 2 candidates: both detached → loss 0, clipfrac 0.5
    loss, clipfrac, _, _ = as_tuple(core_algos.compute_policy_loss_clip_cov(
        old, logp, COV_ADV, torch.ones(1, 4), "token-mean", actor_config(policy_loss={"clip_cov_ratio": 1.0})
    ))
    assert loss.item() == pytest.approx(0.0, abs=ATOL) and clipfrac.item() == pytest.approx(0.5)


def test_kl_cov_penalises_top_covariance_token():
    logp = torch.tensor([[-0.5, -1.25, -1.0, -1.25]])
    old = logp - torch.tensor([[LN(2.0), 0.0, 0.0, 0.0]])  # ρ = [2, 1, 1, 1]
    # cov = (A − 0)(logπ + 1) = [1.5, 0.75, 0, 0] → top-1 = t0
    # t0: −3·2 + 1·ln2 = −5.306853; t1: −(−3)·1 = 3; t2, t3: 0 → mean −0.576713
    loss, clipfrac, ppo_kl, lower = as_tuple(core_algos.compute_policy_loss_kl_cov(
        old, logp, COV_ADV, torch.ones(1, 4), "token-mean", actor_config(policy_loss={"ppo_kl_coef": 1.0})
    ))
    assert loss.item() == pytest.approx(-0.576713, abs=ATOL)
    assert ppo_kl.item() == pytest.approx(LN(2.0) / 4, abs=ATOL)  # mean |log ρ| = 0.173287
    assert clipfrac.item() == 0.0 and lower.item() == 0.0


# ---------------------------------------------------------------------------
# Properties shared by all losses, registry
# ---------------------------------------------------------------------------

ALL_LOSSES = ["vanilla", "gspo", "gpg", "clip_cov", "kl_cov", "geo_mean", "cispo", "sapo", "dppo_tv", "dppo_kl", "dro"]


@functools.cache
def _leak_test_config():
    """clip_cov deterministic (every candidate detached); dro needs a β. Composed once (Hydra is slow)."""
    return actor_config(policy_loss={"clip_cov_ratio": 1.0, "dro_beta": 0.5})


@pytest.mark.parametrize("name", ALL_LOSSES)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_masked_positions_never_leak(name, mode):
    gen = torch.Generator().manual_seed(3)
    old, logp, adv = (torch.randn(4, 6, generator=gen) * 0.3 - 1 for _ in range(3))
    mask = (torch.rand(4, 6, generator=gen) > 0.4).float()
    mask[:, 0] = 1
    noise = torch.randn(3, 4, 6, generator=gen) * 5 * (1 - mask)
    cfg = _leak_test_config()
    clean = loss_of(name)(old, logp, adv, mask, mode, cfg)
    perturbed = loss_of(name)(old + noise[0], logp + noise[1], adv + noise[2], mask, mode, cfg)
    for a, b in zip(clean, perturbed):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", ALL_LOSSES)
def test_registry_contract_returns_loss_and_float_metrics(name):
    assert core_algos.POLICY_LOSS_REGISTRY[name] is get_policy_loss_fn(name)
    cfg = actor_config(policy_loss={"dro_beta": 0.5})
    loss, metrics = get_policy_loss_fn(name)(VANILLA_OLD, VANILLA_LOGP, VANILLA_ADV, ONES, "token-mean", cfg)
    assert loss.dim() == 0 and all(isinstance(value, float) for value in metrics.values())
    # verl 0.9's metric names per loss: gpg reports none, kl_cov only the KL, clip_cov no clipfrac_lower
    expected = {"gpg": set(), "kl_cov": {"actor/ppo_kl"}, "dro": {"actor/ppo_kl"},
                "clip_cov": {"actor/pg_clipfrac", "actor/ppo_kl"}}
    assert set(metrics) == expected.get(name, set(_METRIC_NAMES))


def test_unknown_loss_lists_valid_names():
    with pytest.raises(ValueError) as err:
        get_policy_loss_fn("ppo2")
    for name in ALL_LOSSES:
        assert f"'{name}'" in str(err.value)


def test_deprecated_v04_api_matches_vanilla():
    new = loss_of("vanilla")(VANILLA_OLD, VANILLA_LOGP, VANILLA_ADV, ONES, "token-mean", actor_config())
    old = core_algos.compute_policy_loss(VANILLA_OLD, VANILLA_LOGP, VANILLA_ADV, ONES, cliprange=0.2)
    for a, b in zip(new, old):
        torch.testing.assert_close(a, b)


def test_pure_functions_report_namespaced_metrics():
    logp = VANILLA_LOGP.clone().requires_grad_(True)
    loss, metrics = policy_losses.ppo_clip_loss(VANILLA_OLD, logp, VANILLA_ADV, ONES, 0.2, 0.2)
    assert set(metrics) == {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}
    assert loss.requires_grad and not any(m.requires_grad for m in metrics.values())
