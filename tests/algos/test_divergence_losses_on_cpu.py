"""SAPO, DPPO-TV, DPPO-KL and DRO (verl 0.9's ``sapo``, ``dppo_tv``, ``dppo_kl``, ``dro``): hand-computed values
and gradients, and the registry entries with verl's names, signature and ``(loss, metrics)`` return."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.algos.aggregation import GlobalBatchInfo
from hybridrl.algos.divergence_losses import dppo_kl_loss, dppo_tv_loss, dro_loss, sapo_loss
from hybridrl.trainer.ppo import core_algos

LN = math.log
ATOL = 1e-5


# ---------------------------------------------------------------------------
# SAPO
# ---------------------------------------------------------------------------


def test_sapo_hand_computed():
    old = torch.zeros(1, 2)
    log_prob = torch.tensor([[LN(1.5), LN(0.5)]])
    advantages = torch.tensor([[1.0, -1.0]])
    loss, metrics = sapo_loss(old, log_prob, advantages, torch.ones(1, 2), tau_pos=1.0, tau_neg=1.05)
    # t0: A > 0, τ = 1,    ρ = 1.5: gate = σ(0.5)·4 = 0.622459·4 = 2.489837          → −gate·A = −2.489837
    # t1: A < 0, τ = 1.05, ρ = 0.5: gate = σ(−0.525)·4/1.05 = 0.371684·3.809524 = 1.415938 → −gate·A = 1.415938
    # seq-mean-token-mean of one row: (−2.489837 + 1.415938) / 2 = −0.536949
    assert loss.item() == pytest.approx(-0.536949, abs=ATOL)
    # ppo_kl = mean(log π_old − log π) = −(ln 1.5 + ln 0.5) / 2 = −(0.405465 − 0.693147) / 2 = 0.143841
    assert metrics["actor/ppo_kl"].item() == pytest.approx(0.143841, abs=ATOL)
    assert metrics["actor/pg_clipfrac"].item() == metrics["actor/pg_clipfrac_lower"].item() == 0.0


def test_sapo_gradient_at_ratio_one_is_the_policy_gradient():
    # the gate's slope at ρ = 1 is σ'(0)·τ·4/τ = 1 for any τ: ∂L/∂log π_t = −A_t / n (seq-mean-token-mean, n = 3)
    advantages = torch.tensor([[2.0, -1.0, 0.5]])
    log_prob = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    loss, _ = sapo_loss(log_prob.detach(), log_prob, advantages, torch.ones(1, 3), tau_pos=3.0, tau_neg=0.5)
    loss.backward()
    assert log_prob.grad[0].tolist() == pytest.approx([-2 / 3, 1 / 3, -0.5 / 3], abs=ATOL)


# ---------------------------------------------------------------------------
# DPPO
# ---------------------------------------------------------------------------

# p_old = 0.5 everywhere; p = [0.8, 0.6, 0.2, 0.45]; A = [1, 1, −1, −1]; δ = 0.2, c = 3
DPPO_OLD = torch.log(torch.full((1, 4), 0.5))
DPPO_PROBS = torch.tensor([[0.8, 0.6, 0.2, 0.45]])
DPPO_ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0]])


@pytest.mark.parametrize("loss_fn", [dppo_tv_loss, dppo_kl_loss])
def test_dppo_hand_computed_value_and_gradient(loss_fn):
    log_prob = torch.log(DPPO_PROBS).requires_grad_(True)
    loss, metrics = loss_fn(DPPO_OLD, log_prob, DPPO_ADV, torch.ones(1, 4), 0.2, 0.2, 3.0)
    # TV: p − p_old = [0.3, 0.1, −0.3, −0.05]: t0 (A > 0) 0.3 > δ out; t1 in; t2 (A < 0) −0.3 < −δ out; t3 in
    # KL_b = [0.223144, 0.020411, 0.223144, 0.005025]: t0, t2 over δ and moving with A → out; t1, t3 in
    # ρ = [1.6, 1.2, 0.4, 0.9] (< c: untruncated); L = −A·ρ·log π on t1, t3:
    #   t1: −1·1.2·ln 0.6 = 0.612991; t3: 1·0.9·ln 0.45 = −0.718657 → token-mean (0.612991 − 0.718657)/4 = −0.026417
    assert loss.item() == pytest.approx(-0.026417, abs=ATOL)
    assert metrics["actor/pg_clipfrac"].item() == pytest.approx(0.5)  # 2 of 4 tokens outside the region
    assert metrics["actor/pg_clipfrac_lower"].item() == 0.0  # no ρ > c
    # ppo_kl = −mean(ln 1.6, ln 1.2, ln 0.4, ln 0.9) = −(0.470004 + 0.182322 − 0.916291 − 0.105361)/4 = 0.092331
    assert metrics["actor/ppo_kl"].item() == pytest.approx(0.092331, abs=ATOL)
    loss.backward()
    # ∂L/∂log π = −A·sg(ρ)/4 inside, 0 outside: t1 −1.2/4 = −0.3; t3 0.9/4 = 0.225
    assert log_prob.grad[0].tolist() == pytest.approx([0.0, -0.3, 0.0, 0.225], abs=ATOL)


def test_tv_and_kl_regions_differ():
    # δ = 0.1, A = 1 on both tokens
    # t0: p_old 0.9 → p 0.99: TV gain 0.09 ≤ δ (in); KL_b = 0.9 ln(0.9/0.99) + 0.1 ln(0.1/0.01) = 0.144479 > δ (out)
    # t1: p_old 0.5 → p 0.65: TV gain 0.15 > δ (out); KL_b = 0.5 ln(0.5/0.65) + 0.5 ln(0.5/0.35) = 0.047155 (in)
    old, log_prob = torch.log(torch.tensor([[0.9, 0.5]])), torch.log(torch.tensor([[0.99, 0.65]]))
    args = (old, log_prob, torch.ones(1, 2), torch.ones(1, 2), 0.1, 0.1, 3.0)
    # TV keeps t0: −1.1·ln 0.99 / 2 = 0.005528; KL keeps t1: −1.3·ln 0.65 / 2 = 0.280009
    assert dppo_tv_loss(*args)[0].item() == pytest.approx(0.005528, abs=ATOL)
    assert dppo_kl_loss(*args)[0].item() == pytest.approx(0.280009, abs=ATOL)


def test_dppo_truncates_the_weight_at_clip_ratio_c():
    # ρ = e^2 = 7.389 > c = 3: w = 3 (no gradient through it); A = −1, p_old = e^−3 → p = e^−1: p − p_old ≥ −δ (in)
    old, log_prob = torch.tensor([[-3.0]]), torch.tensor([[-1.0]], requires_grad=True)
    loss, metrics = dppo_tv_loss(old, log_prob, -torch.ones(1, 1), torch.ones(1, 1), 0.2, 0.2, 3.0)
    assert loss.item() == pytest.approx(3.0 * -1.0, abs=ATOL)  # −A·w·log π = 1·3·(−1)
    assert metrics["actor/pg_clipfrac_lower"].item() == 1.0  # the one token was truncated
    loss.backward()
    assert log_prob.grad.item() == pytest.approx(3.0, abs=ATOL)  # −A·w


# ---------------------------------------------------------------------------
# DRO
# ---------------------------------------------------------------------------


def test_dro_hand_computed_value_and_gradient():
    old = torch.zeros(1, 2)
    log_prob = torch.tensor([[LN(2.0), LN(0.5)]], requires_grad=True)
    advantages = torch.tensor([[1.0, -1.0]])
    loss, metrics = dro_loss(old, log_prob, advantages, torch.ones(1, 2), dro_beta=0.5)
    # L = −(A·log π − ½β (log ρ)²): t0 −(0.693147 − 0.25·0.480453) = −0.573034; t1 the same → mean −0.573034
    assert loss.item() == pytest.approx(-0.573034, abs=ATOL)
    assert set(metrics) == {"actor/ppo_kl"}
    assert metrics["actor/ppo_kl"].item() == pytest.approx(0.0, abs=ATOL)  # mean(−ln 2 − ln 0.5) = 0
    loss.backward()
    # ∂L/∂log π = −(A − β log ρ)/2: t0 −(1 − 0.346574)/2 = −0.326713; t1 −(−1 + 0.346574)/2 = 0.326713
    assert log_prob.grad[0].tolist() == pytest.approx([-0.326713, 0.326713], abs=ATOL)


@pytest.mark.parametrize("beta", [None, 0.0, -1.0])
def test_dro_needs_a_positive_beta(beta):
    with pytest.raises(ValueError, match="policy_loss.dro_beta"):
        dro_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), dro_beta=beta)


# ---------------------------------------------------------------------------
# Registry: verl 0.9's names, signature and return; global normalisation from config.global_batch_info
# ---------------------------------------------------------------------------

CONFIG = {
    "clip_ratio": 0.2,
    "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.2,
    "clip_ratio_c": 3.0,
    "tau_pos": 1.0,
    "tau_neg": 1.05,
    "policy_loss": {"dro_beta": 0.5},
}
PURE = {
    "sapo": lambda *t, **kw: sapo_loss(*t, tau_pos=1.0, tau_neg=1.05, **kw),
    "dppo_tv": lambda *t, **kw: dppo_tv_loss(*t, 0.2, 0.2, 3.0, **kw),
    "dppo_kl": lambda *t, **kw: dppo_kl_loss(*t, 0.2, 0.2, 3.0, **kw),
    "dro": lambda *t, **kw: dro_loss(*t, dro_beta=0.5, **kw),
}


def _agg_kwargs(name: str) -> dict:
    """The aggregation the registry call below asks for (SAPO always aggregates seq-mean-token-mean)."""
    return {} if name == "sapo" else {"loss_agg_mode": "token-mean"}


@pytest.mark.parametrize("name", sorted(PURE))
def test_registry_entry_is_the_pure_loss_with_verl_shape(name):
    fn = core_algos.get_policy_loss_fn(name)
    assert fn is getattr(core_algos, f"compute_policy_loss_{name}")
    gen = torch.Generator().manual_seed(0)
    old, new = -torch.rand(3, 4, generator=gen), -torch.rand(3, 4, generator=gen)
    adv, mask = torch.randn(3, 4, generator=gen), torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    info = GlobalBatchInfo(dp_size=2, batch_num_tokens=20, global_batch_size=4)  # ≠ this batch × 2 (18, 6)
    config = {**CONFIG, "global_batch_info": info.as_kwargs()}
    loss, metrics = fn(old, new, adv, mask, "token-mean", config)
    pure_loss, pure_metrics = PURE[name](old, new, adv, mask, global_batch=info, **_agg_kwargs(name))
    torch.testing.assert_close(loss, pure_loss)
    local_loss, _ = PURE[name](old, new, adv, mask, **_agg_kwargs(name))
    assert not torch.allclose(loss, local_loss)  # config.global_batch_info was honoured
    assert metrics == {key: pytest.approx(value.item()) for key, value in pure_metrics.items()}
    assert all(isinstance(value, float) for value in metrics.values())
