"""On-policy distillation losses (verl 0.9's ``verl.trainer.distillation``): pure math, tensors in, tensors out.

The student samples a response; a frozen teacher scores the student's tokens; the student is pulled towards
the teacher on the student's own samples (Agarwal et al. 2023, arXiv 2306.13649; Thinking Machines,
"On-policy distillation", 2025).

Notation:
    B: samples, T: response tokens, K: top-k ids per token, V: vocabulary.
    log q_t = log π_student(y_t | y_<t), log p_t = log π_teacher(y_t | y_<t) of the sampled token y_t.
    δ_t = log q_t − log p_t.
    m: ``[B, T]`` response mask.

Per-token losses ℓ_t ``[B, T]``:
    reverse KL estimators (KL(q ‖ p) from one sample y_t ~ q; ``hybridrl.algos.kl``):
        k1 / kl:         δ_t
        k2 / mse:        ½ δ_t²
        k3 / low_var_kl: e^{−δ_t} + δ_t − 1
        abs:             |δ_t|
    forward_kl_topk: Σ_{k ≤ K} p_k (log p_k − log q_k) over the teacher's top-k ids (clamped at 0: the top-k
        masses do not sum to 1, so the sum can be negative).

The loss from ℓ (``loss_max_clamp``: ℓ clamped to ±c first, as verl; k1 can be negative):
    supervised (use_policy_gradient=False):  L = agg(ℓ, m)                                (backpropagated through ℓ)
    policy gradient (use_policy_gradient=True): advantages A_t = −sg(ℓ_t), L = PPO-clip(log q, log q_old, A, m)
        with ``clip_ratio_low/high`` and verl's default dual clip c = 3 (vanilla PPO only, as verl).
Mixing with the task loss: L_total = L_task + c · L (use_task_rewards, c = distillation_loss_coef), else L alone.

Deviation from verl: none in the formulas. verl computes the top-k student log-probs inside its engine's logits
processor; here :func:`student_topk_log_probs` does it from a ``[B, T, V]`` logits tensor, and the actor's update
from its log-prob pass (``hybridrl.workers.actor.distillation_update.log_probs_at_ids``).
"""

from __future__ import annotations

import torch

from hybridrl.algos.aggregation import LOCAL_BATCH, GlobalBatchInfo, agg_loss
from hybridrl.algos.kl import kl_penalty
from hybridrl.algos.policy_losses import ppo_clip_loss

__all__ = [
    "ESTIMATOR_LOSS_MODES",
    "TOPK_LOSS_MODES",
    "combine_with_task_loss",
    "distillation_loss",
    "forward_kl_topk",
    "reverse_kl_estimate",
    "student_topk_log_probs",
    "topk_overlap",
]

# single-sample reverse-KL estimators (verl registers these names for one loss function)
ESTIMATOR_LOSS_MODES: tuple[str, ...] = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
TOPK_LOSS_MODES: tuple[str, ...] = ("forward_kl_topk",)
# dual-clip bound c of the policy-gradient mode: verl's vanilla policy loss reads ``clip_ratio_c`` from the
# distillation loss config, which has none, so its default 3.0 applies.
_DUAL_CLIP_RATIO_C = 3.0


def reverse_kl_estimate(
    student_log_probs: torch.Tensor, teacher_log_probs: torch.Tensor, loss_mode: str
) -> torch.Tensor:
    """Per-token reverse KL estimate ℓ_t of KL(student ‖ teacher) from the sampled token.

    Args:
        student_log_probs: ``[B, T]`` log q_t (with gradient in the supervised mode).
        teacher_log_probs: ``[B, T]`` log p_t.
        loss_mode: one of :data:`ESTIMATOR_LOSS_MODES`.

    Returns:
        ``[B, T]`` ℓ_t (not masked).
    """
    if loss_mode not in ESTIMATOR_LOSS_MODES:
        raise ValueError(f"distillation.distillation_loss.loss_mode={loss_mode!r} is not one of "
                         f"{list(ESTIMATOR_LOSS_MODES + TOPK_LOSS_MODES)}")
    return kl_penalty(student_log_probs, teacher_log_probs, loss_mode)


def student_topk_log_probs(student_logits: torch.Tensor, topk_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The student's log-probs at the teacher's top-k ids, and the student's own top-k ids.

    Args:
        student_logits: ``[B, T, V]``.
        topk_ids: ``[B, T, K]`` the teacher's top-k token ids.

    Returns:
        ``(log q at topk_ids [B, T, K] in fp32, the student's top-k ids [B, T, K])``.
    """
    # log_softmax(x)[i] = x_i − logsumexp(x), in fp32 (bf16 logits lose the small probabilities)
    logits = student_logits.float()
    log_z = torch.logsumexp(logits, dim=-1, keepdim=True)
    gathered = torch.gather(logits, dim=-1, index=topk_ids) - log_z
    own_topk_ids = torch.topk(logits, k=topk_ids.shape[-1], dim=-1).indices  # log_softmax is monotonic
    return gathered, own_topk_ids


def forward_kl_topk(
    student_topk_log_probs: torch.Tensor,
    teacher_topk_log_probs: torch.Tensor,
    log_prob_min_clamp: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k forward KL Σ_k p_k (log p_k − log q_k) per token.

    Args:
        student_topk_log_probs: ``[B, T, K]`` log q at the teacher's top-k ids.
        teacher_topk_log_probs: ``[B, T, K]`` log p of the teacher's top-k ids.
        log_prob_min_clamp: both log-probs clamped from below first (stability where p or q ≈ 0); None: not.

    Returns:
        ``(kl [B, T] clamped at 0, student mass Σ_k q_k [B, T], teacher mass Σ_k p_k [B, T])``; the masses are
        taken before the clamp.
    """
    student = student_topk_log_probs.float()
    teacher = teacher_topk_log_probs.float()
    student_mass = student.exp().sum(dim=-1)
    teacher_mass = teacher.exp().sum(dim=-1)
    if log_prob_min_clamp is not None:
        student = student.clamp_min(log_prob_min_clamp)
        teacher = teacher.clamp_min(log_prob_min_clamp)
    kl = (teacher.exp() * (teacher - student)).sum(dim=-1)
    return kl.clamp_min(0.0), student_mass, teacher_mass


def topk_overlap(
    teacher_topk_ids: torch.Tensor,
    student_topk_ids: torch.Tensor,
    teacher_topk_log_probs: torch.Tensor,
    student_topk_log_probs: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's overlap diagnostics (arXiv 2604.13016): how many teacher top-k ids are also student top-k ids, and
    the mean −p_k (log p_k − log q_k) over those overlapping ids.

    Args:
        teacher_topk_ids, student_topk_ids: ``[B, T, K]``.
        teacher_topk_log_probs, student_topk_log_probs: ``[B, T, K]`` at the teacher's ids.

    Returns:
        ``(overlap_count [B, T] int, overlap_token_advantage [B, T]; 0 where nothing overlaps)``.
    """
    overlap = (teacher_topk_ids.unsqueeze(-1) == student_topk_ids.unsqueeze(-2)).any(dim=-1)  # [B, T, K]
    count = overlap.sum(dim=-1)
    token_kl = teacher_topk_log_probs.exp() * (teacher_topk_log_probs - student_topk_log_probs)
    advantage = (-token_kl * overlap).sum(dim=-1) / count.clamp_min(1)
    return count, torch.where(count > 0, advantage, torch.zeros_like(advantage))


def distillation_loss(
    per_token_loss: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    *,
    loss_max_clamp: float | None = None,
    use_policy_gradient: bool = False,
    log_prob: torch.Tensor | None = None,
    old_log_prob: torch.Tensor | None = None,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    global_batch: GlobalBatchInfo = LOCAL_BATCH,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The distillation loss L from per-token losses ℓ (see the module docstring), and its metrics.

    Args:
        per_token_loss: ``[B, T]`` ℓ.
        response_mask: ``[B, T]`` m.
        loss_agg_mode: ``actor_rollout_ref.actor.loss_agg_mode``.
        loss_max_clamp: ℓ clamped to [−c, c] before use; None: not clamped.
        use_policy_gradient: A = −sg(ℓ) in a PPO-clip loss instead of backpropagating through ℓ.
        log_prob, old_log_prob: ``[B, T]`` log q now and at sampling time (policy-gradient mode only).
        clip_ratio_low, clip_ratio_high: the PPO clip of the policy-gradient mode.
        global_batch: the mini-batch normalisers of :func:`agg_loss`.

    Returns:
        ``(L [], metrics)``: ``distillation/loss_min``, ``distillation/loss_max`` (of ℓ over m, before the clamp)
        and in policy-gradient mode ``distillation/pg_clipfrac``, ``distillation/ppo_kl``,
        ``distillation/pg_clipfrac_lower``.
    """
    mask = response_mask.bool()
    with torch.no_grad():
        valid = per_token_loss[mask]
        metrics = {"distillation/loss_min": float(valid.min()) if valid.numel() else 0.0,
                   "distillation/loss_max": float(valid.max()) if valid.numel() else 0.0}
    if loss_max_clamp is not None:
        per_token_loss = per_token_loss.clamp(min=-loss_max_clamp, max=loss_max_clamp)
    if not use_policy_gradient:
        return agg_loss(per_token_loss, response_mask, loss_agg_mode, **global_batch.as_kwargs()), metrics
    if log_prob is None or old_log_prob is None:
        raise ValueError("distillation_loss with use_policy_gradient needs log_prob and old_log_prob")
    # the teacher's per-token reward is −ℓ_t: the policy gradient pushes up tokens the teacher likes more
    loss, pg_metrics = ppo_clip_loss(old_log_prob, log_prob, -per_token_loss.detach(), response_mask,
                                     clip_ratio_low, clip_ratio_high, _DUAL_CLIP_RATIO_C, loss_agg_mode, global_batch)
    metrics.update({"distillation/" + key.split("/", 1)[1]: float(value) for key, value in pg_metrics.items()})
    return loss, metrics


def combine_with_task_loss(
    task_loss: torch.Tensor, distill_loss: torch.Tensor, use_task_rewards: bool, distillation_loss_coef: float
) -> torch.Tensor:
    """L_task + c · L_distill with ``use_task_rewards``; L_distill alone without (the task loss is dropped, as verl).

    Args:
        task_loss, distill_loss: ``[]`` scalars.
    """
    if not use_task_rewards:
        return distill_loss
    return task_loss + distillation_loss_coef * distill_loss
