"""The distillation term of the actor's loss (verl 0.9's ``distillation_ppo_loss``), per micro-batch.

The driver puts the teacher's log-probs of the sampled tokens in the batch (``teacher_logprobs [B, R]``) and the
loss settings in ``meta_info["distillation"]`` (:class:`DistillationLossParams`); the actor then adds

    policy_loss ← policy_loss + c · L_distill      (use_task_rewards; c = distillation_loss_coef)
    policy_loss ← L_distill                        (otherwise: the task loss is dropped, as verl)

with L_distill from :mod:`hybridrl.algos.distillation`: a single-sample estimator (k1, k3, ...) of the sampled
token, or the top-k forward KL (``forward_kl_topk``). For the latter the teacher's forward also returns, per
response token, its ``topk`` largest log-probs and their ids (``teacher_topk_logprobs, teacher_topk_ids
[B, R, K]``; verl's batch calls them ``teacher_logprobs`` / ``teacher_ids``), and the student's forward gathers
its own log-probs at those ids from the same logits as its log-probs (:func:`log_probs_at_ids`), at the same
temperature:

    log q(v) = z_v / τ − log Z,   log Z = z_y / τ − log q(y)     (y: the sampled token, z: the logits)

so the student's [N, V] log-softmax is never formed again: log Z and its gradient come from the log-prob pass.
The teacher's top-k is taken in blocks of tokens (:func:`topk_log_probs`; no [N, V] float32 copy of all logits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hybridrl.algos.aggregation import GlobalBatchInfo
from hybridrl.algos.distillation import (
    TOPK_LOSS_MODES,
    combine_with_task_loss,
    distillation_loss,
    forward_kl_topk,
    reverse_kl_estimate,
    topk_overlap,
)
from hybridrl.utils import torch_functional as verl_F

__all__ = [
    "DISTILLATION_META_KEY", "TEACHER_LOG_PROBS_KEY", "TEACHER_TOPK_IDS_KEY", "TEACHER_TOPK_LOG_PROBS_KEY",
    "TEACHER_TOPK_META_KEY", "DistillationLossParams", "add_distillation_loss", "log_probs_at_ids", "topk_log_probs",
]

# the batch key of the teacher's log-probs of the sampled response tokens [B, R] (verl's name)
TEACHER_LOG_PROBS_KEY = "teacher_logprobs"
# the batch keys of the teacher's top-k log-probs and token ids [B, R, K] (forward_kl_topk)
TEACHER_TOPK_LOG_PROBS_KEY = "teacher_topk_logprobs"
TEACHER_TOPK_IDS_KEY = "teacher_topk_ids"
# the meta_info key asking a teacher's compute_ref_log_prob for its top-k (its value: K)
TEACHER_TOPK_META_KEY = "teacher_topk"
# tokens per block of the teacher's top-k: bounds its float32 copy of the logits to this many × V
_TOPK_BLOCK_TOKENS = 1024
# the meta_info key carrying DistillationLossParams to the actor's update
DISTILLATION_META_KEY = "distillation"


@dataclass(frozen=True)
class DistillationLossParams:
    """``distillation.distillation_loss``'s values the actor reads (no defaults: the YAML holds them)."""

    loss_mode: str
    topk: int
    log_prob_min_clamp: float | None
    use_task_rewards: bool
    distillation_loss_coef: float
    loss_max_clamp: float | None
    use_policy_gradient: bool
    clip_ratio_low: float
    clip_ratio_high: float

    @classmethod
    def from_config(cls, loss_section: Any) -> DistillationLossParams:
        """From the ``distillation.distillation_loss`` section; verl's ``clip_ratio`` fills an unset low/high."""
        clip = float(loss_section.clip_ratio)
        low, high = loss_section.clip_ratio_low, loss_section.clip_ratio_high
        clamp, min_clamp = loss_section.loss_max_clamp, loss_section.log_prob_min_clamp
        return cls(
            loss_mode=str(loss_section.loss_mode),
            topk=int(loss_section.topk),
            log_prob_min_clamp=None if min_clamp is None else float(min_clamp),
            use_task_rewards=bool(loss_section.use_task_rewards),
            distillation_loss_coef=float(loss_section.distillation_loss_coef),
            loss_max_clamp=None if clamp is None else float(clamp),
            use_policy_gradient=bool(loss_section.use_policy_gradient),
            clip_ratio_low=clip if low is None else float(low),
            clip_ratio_high=clip if high is None else float(high),
        )

    @property
    def uses_topk(self) -> bool:
        """Whether the loss needs the teacher's top-k (``forward_kl_topk``)."""
        return self.loss_mode in TOPK_LOSS_MODES


def topk_log_probs(logits: torch.Tensor, k: int, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest log-probs of ``softmax(logits / temperature)`` and their ids, ``[N, T, K]`` each (fp32,
    long), computed in blocks of tokens without gradient (a teacher's forward).

    Args:
        logits: ``[N, T, V]``.
    """
    if k > logits.shape[-1]:
        raise ValueError(f"distillation.distillation_loss.topk={k} is larger than the vocabulary "
                         f"({logits.shape[-1]} logits); set topk <= {logits.shape[-1]}")
    flat = logits.detach().reshape(-1, logits.shape[-1])
    values = torch.empty(flat.shape[0], k, dtype=torch.float32, device=flat.device)
    ids = torch.empty(flat.shape[0], k, dtype=torch.long, device=flat.device)
    for start in range(0, flat.shape[0], _TOPK_BLOCK_TOKENS):
        block = flat[start : start + _TOPK_BLOCK_TOKENS].float() / temperature
        top = torch.topk(block, k, dim=-1)
        values[start : start + block.shape[0]] = top.values - torch.logsumexp(block, dim=-1, keepdim=True)
        ids[start : start + block.shape[0]] = top.indices
    return values.reshape(*logits.shape[:-1], k), ids.reshape(*logits.shape[:-1], k)


def log_probs_at_ids(
    logits: torch.Tensor, next_tokens: torch.Tensor, log_probs: torch.Tensor, ids: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-probs of ``softmax(logits / temperature)`` at ``ids`` (with gradient), and the model's own top-k ids.

    log Z comes from the sampled token's log-prob (module docstring): no second log-softmax over the vocabulary.

    Args:
        logits: ``[N, T, V]``.
        next_tokens: ``[N, T]`` the sampled tokens y.
        log_probs: ``[N, T]`` log q(y) at ``temperature`` (with its gradient, when training).
        ids: ``[N, T, K]``.

    Returns:
        ``(log q at ids [N, T, K] fp32, own top-k ids [N, T, K])``.
    """
    scaled_at_sampled = logits.gather(-1, next_tokens.unsqueeze(-1)).squeeze(-1).float() / temperature
    log_z = scaled_at_sampled - log_probs.float()  # [N, T]
    at_ids = logits.gather(-1, ids.long()).float() / temperature - log_z.unsqueeze(-1)
    with torch.no_grad():
        own_ids = torch.topk(logits, ids.shape[-1], dim=-1).indices  # softmax is monotonic
    return at_ids, own_ids


def add_distillation_loss(
    params: DistillationLossParams,
    policy_loss: torch.Tensor,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    micro_batch: Any,
    loss_agg_mode: str,
    global_batch: GlobalBatchInfo,
    metrics: dict[str, float],
    outputs: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """The micro-batch's loss with the distillation term (module docstring); adds ``distillation/*`` to ``metrics``.

    Args:
        policy_loss: ``[]`` the task (PPO) loss of the micro-batch.
        log_prob, old_log_prob: ``[B, R]`` the student's log-probs now (with gradient) and at sampling time.
        micro_batch: holds ``teacher_logprobs [B, R]`` (``teacher_topk_logprobs, teacher_topk_ids [B, R, K]`` for
            the top-k loss) and ``response_mask [B, R]``.
        outputs: the student's forward outputs; the top-k loss reads ``log_probs_at_topk, own_topk_ids``.
    """
    response_mask = micro_batch["response_mask"]
    if params.uses_topk:
        per_token = _forward_kl_topk_per_token(params, micro_batch, outputs, metrics)
    else:
        per_token = reverse_kl_estimate(log_prob, micro_batch[TEACHER_LOG_PROBS_KEY], params.loss_mode)
    if params.use_policy_gradient:
        per_token = per_token.detach()
    distill, distill_metrics = distillation_loss(
        per_token, response_mask, loss_agg_mode, loss_max_clamp=params.loss_max_clamp,
        use_policy_gradient=params.use_policy_gradient, log_prob=log_prob, old_log_prob=old_log_prob,
        clip_ratio_low=params.clip_ratio_low, clip_ratio_high=params.clip_ratio_high, global_batch=global_batch,
    )
    metrics.update(distill_metrics)
    if not params.uses_topk:
        with torch.no_grad():  # k1 can be negative: verl logs the mean absolute per-token loss too
            metrics["distillation/abs_loss"] = float(verl_F.masked_mean(per_token.abs(), response_mask))
    metrics["distillation/loss"] = float(distill.detach())
    return combine_with_task_loss(policy_loss, distill, params.use_task_rewards, params.distillation_loss_coef)


def _forward_kl_topk_per_token(params: DistillationLossParams, micro_batch: Any,
                               outputs: dict[str, torch.Tensor] | None, metrics: dict[str, float]) -> torch.Tensor:
    """``[B, R]`` Σ_k p_k (log p_k − log q_k) over the teacher's top-k (clamped at 0), and verl's mass and overlap
    metrics (``distillation/student_mass*``, ``teacher_mass*``, ``overlap_ratio``, ``overlap_token_advantage``)."""
    if outputs is None or "log_probs_at_topk" not in outputs:
        raise KeyError(f"loss_mode=forward_kl_topk needs the teacher's {TEACHER_TOPK_IDS_KEY} in the batch (the "
                       "teachers add it when distillation.distillation_loss.loss_mode=forward_kl_topk)")
    student, teacher = outputs["log_probs_at_topk"], micro_batch[TEACHER_TOPK_LOG_PROBS_KEY].float()
    per_token, student_mass, teacher_mass = forward_kl_topk(student, teacher, params.log_prob_min_clamp)
    with torch.no_grad():
        mask = micro_batch["response_mask"].bool()
        count, advantage = topk_overlap(micro_batch[TEACHER_TOPK_IDS_KEY], outputs["own_topk_ids"], teacher, student)
        for name, values in (("student_mass", student_mass[mask]), ("teacher_mass", teacher_mass[mask])):
            if values.numel():
                metrics[f"distillation/{name}"] = float(values.mean())
                metrics[f"distillation/{name}_min"] = float(values.min())
                metrics[f"distillation/{name}_max"] = float(values.max())
        if mask.any():
            metrics["distillation/overlap_ratio"] = float(count[mask].float().mean()) / teacher.shape[-1]
        overlapping = mask & (count > 0)
        metrics["distillation/overlap_token_advantage"] = (float(advantage[overlapping].mean())
                                                           if overlapping.any() else 0.0)
    return per_token
