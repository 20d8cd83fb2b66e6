"""DPO-family preference losses: pure tensor math over (chosen, rejected) pairs.

Papers → what this module does differently, if anything:
    sigmoid   DPO, Rafailov et al. 2023, arXiv 2305.18290; ``label_smoothing`` ε > 0 is conservative DPO
              (cDPO, Mitchell 2023: the label is flipped with probability ε). As verl's SPIN recipe.
    ipo       IPO, Azar et al. 2023, arXiv 2310.12036 → sequence log-probs are *sums* over the response
              (verl's SPIN recipe); the paper (and TRL) average them over tokens. ``label_smoothing`` unused.
    hinge     SLiC-HF, Zhao et al. 2023, arXiv 2305.10425 (calibration loss with δ = 1/β, as TRL's
              ``hinge``); not in verl's SPIN recipe. ``label_smoothing`` unused.

Notation:
    P: number of preference pairs; B = 2P rows, pair k on rows (2k, 2k+1) = (chosen, rejected).
    R: response length. Sequence log-prob  log π(y|x) = Σ_t m_t · log π(y_t | x, y_<t)  over the response
    mask m. β > 0 (``beta``): the strength of the KL tie to the reference π_ref.

    h   = [log π(y_c) − log π_ref(y_c)] − [log π(y_r) − log π_ref(y_r)]        the DPO "logits"  [P]
    r_c = β · (log π(y_c) − log π_ref(y_c)),  r_r = β · (log π(y_r) − log π_ref(y_r))   implicit rewards [P]

    sigmoid   L = −(1 − ε) · log σ(β h) − ε · log σ(−β h)
    ipo       L = (h − 1 / (2β))²
    hinge     L = max(0, 1 − β h)

The batch loss is a (weighted) mean over pairs; ``pair_weights`` lets a caller pad a batch with
weight-0 pairs (equal rows on every data-parallel rank) without changing the loss.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = [
    "DPO_LOSS_REGISTRY",
    "DPOLossFn",
    "compute_dpo_loss",
    "dpo_logits",
    "dpo_reward_metrics",
    "get_dpo_loss_fn",
    "hinge_loss",
    "ipo_loss",
    "register_dpo_loss",
    "sequence_log_prob",
    "sigmoid_dpo_loss",
    "split_pairs",
]

# fn(logits h [P], beta, label_smoothing) -> per-pair losses [P]
DPOLossFn = Callable[[torch.Tensor, float, float], torch.Tensor]

DPO_LOSS_REGISTRY: dict[str, DPOLossFn] = {}


def register_dpo_loss(name: str) -> Callable[[DPOLossFn], DPOLossFn]:
    """Decorator: register a per-pair DPO loss under ``name`` (the value of ``algorithm.dpo.loss_type``)."""

    def decorator(fn: DPOLossFn) -> DPOLossFn:
        if name in DPO_LOSS_REGISTRY and DPO_LOSS_REGISTRY[name] is not fn:
            raise ValueError(f"DPO loss {name!r} is already registered")
        DPO_LOSS_REGISTRY[name] = fn
        return fn

    return decorator


def get_dpo_loss_fn(name: str) -> DPOLossFn:
    """The registered loss for ``algorithm.dpo.loss_type=name``; a clear error names the choices."""
    if name not in DPO_LOSS_REGISTRY:
        raise ValueError(
            f"algorithm.dpo.loss_type={name!r} is not a DPO loss; choose one of {sorted(DPO_LOSS_REGISTRY)}."
        )
    return DPO_LOSS_REGISTRY[name]


# ---------------------------------------------------------------------------
# Per-pair losses
# ---------------------------------------------------------------------------


@register_dpo_loss("sigmoid")
def sigmoid_dpo_loss(logits: torch.Tensor, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """DPO / cDPO: ``−(1−ε) log σ(β h) − ε log σ(−β h)``, ``[P] → [P]``."""
    # logsigmoid is the stable form of log(1 / (1 + exp(−x))) for large |x|
    return -(1.0 - label_smoothing) * F.logsigmoid(beta * logits) - label_smoothing * F.logsigmoid(-beta * logits)


@register_dpo_loss("ipo")
def ipo_loss(logits: torch.Tensor, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """IPO: ``(h − 1/(2β))²``, ``[P] → [P]`` (β plays the role of the paper's 1/τ; ε is unused)."""
    return (logits - 1.0 / (2.0 * beta)) ** 2


@register_dpo_loss("hinge")
def hinge_loss(logits: torch.Tensor, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """SLiC hinge: ``max(0, 1 − β h)``, ``[P] → [P]`` (ε is unused)."""
    return torch.relu(1.0 - beta * logits)


# ---------------------------------------------------------------------------
# Sequence log-probs, pairs, logits
# ---------------------------------------------------------------------------


def sequence_log_prob(token_log_probs: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``Σ_t m_t · log π(y_t)``: ``token_log_probs [B, R]``, ``response_mask [B, R]`` → ``[B]``.

    Masked positions may hold anything finite (padding scores); they are zeroed, not multiplied through
    as NaN, because ``where`` is used instead of a product.
    """
    mask = response_mask.bool()
    return torch.where(mask, token_log_probs, torch.zeros_like(token_log_probs)).sum(dim=-1)


def split_pairs(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``[2P, ...]`` laid out (chosen, rejected, chosen, rejected, …) → ``(chosen [P, ...], rejected [P, ...])``."""
    if values.shape[0] % 2 != 0:
        raise ValueError(f"a DPO batch has an even number of rows (chosen, rejected pairs); got {values.shape[0]}")
    return values[0::2], values[1::2]


def dpo_logits(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
) -> torch.Tensor:
    """``h = (log π_c − log π_r) − (log π_ref,c − log π_ref,r)``; every input ``[P]``, output ``[P]``."""
    return (policy_chosen_logps - policy_rejected_logps) - (ref_chosen_logps - ref_rejected_logps)


def _weighted_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (values * weights).sum() / weights.sum().clamp(min=1e-8)


def dpo_reward_metrics(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
    pair_weights: torch.Tensor | None = None,
) -> dict[str, float]:
    """Implicit-reward statistics (weighted means over pairs), computed without gradients.

    Returns ``actor/rewards_chosen`` (mean r_c), ``actor/rewards_rejected`` (mean r_r),
    ``actor/reward_accuracy`` (share of pairs with r_c > r_r), ``actor/reward_margin`` (mean r_c − r_r),
    ``actor/dpo_logits`` (mean h), ``actor/policy_chosen_logps`` and ``actor/policy_rejected_logps``.
    Empty when every weight is 0 (a rank that holds only padding pairs).
    """
    with torch.no_grad():
        weights = torch.ones_like(policy_chosen_logps) if pair_weights is None else pair_weights.float()
        if float(weights.sum()) <= 0:
            return {}
        rewards_chosen = beta * (policy_chosen_logps - ref_chosen_logps)
        rewards_rejected = beta * (policy_rejected_logps - ref_rejected_logps)
        logits = dpo_logits(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
        stats = {
            "actor/rewards_chosen": rewards_chosen,
            "actor/rewards_rejected": rewards_rejected,
            "actor/reward_accuracy": (rewards_chosen > rewards_rejected).float(),
            "actor/reward_margin": rewards_chosen - rewards_rejected,
            "actor/dpo_logits": logits,
            "actor/policy_chosen_logps": policy_chosen_logps,
            "actor/policy_rejected_logps": policy_rejected_logps,
        }
        return {name: float(_weighted_mean(value.float(), weights)) for name, value in stats.items()}


def compute_dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    pair_weights: torch.Tensor | None = None,
    num_pairs: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The DPO-family loss of a batch of pairs and its metrics.

    Args:
        policy_chosen_logps, policy_rejected_logps: sequence log-probs under the trained policy ``[P]``
            (carry gradients).
        ref_chosen_logps, ref_rejected_logps: the same under the frozen reference ``[P]``.
        beta: β > 0.
        loss_type: a key of :data:`DPO_LOSS_REGISTRY` (``sigmoid``, ``ipo``, ``hinge``).
        label_smoothing: ε ∈ [0, 0.5) for ``sigmoid`` (cDPO).
        pair_weights: ``[P]`` weights (1 = real pair, 0 = padding); default all ones.
        num_pairs: the loss denominator; default ``Σ pair_weights``. A data-parallel caller passes
            ``global_pairs / world_size`` so the rank-averaged gradient is the global mean.

    Returns:
        ``(loss [], metrics)``: ``loss = Σ_k w_k L_k / num_pairs``; metrics are ``actor/dpo_loss`` (the
        weighted mean loss) and those of :func:`dpo_reward_metrics`.
    """
    if beta <= 0:
        raise ValueError(f"algorithm.dpo.beta must be > 0, got {beta}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"algorithm.dpo.label_smoothing must be in [0, 0.5), got {label_smoothing}")
    loss_fn = get_dpo_loss_fn(loss_type)
    logits = dpo_logits(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    losses = loss_fn(logits, beta, label_smoothing)  # [P]
    weights = torch.ones_like(losses) if pair_weights is None else pair_weights.to(losses.dtype)
    denominator = weights.sum().clamp(min=1e-8) if num_pairs is None else torch.tensor(float(num_pairs))
    loss = (losses * weights).sum() / denominator
    metrics = dpo_reward_metrics(
        policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta, weights
    )
    if metrics:
        metrics["actor/dpo_loss"] = float(_weighted_mean(losses.detach(), weights))
    return loss, metrics
