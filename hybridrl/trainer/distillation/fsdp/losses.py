"""verl 0.9's ``verl.trainer.distillation.fsdp.losses.compute_forward_kl_topk``: the top-k forward KL from the
student's logits, in verl's packed (``thd``) layout. The math is :mod:`hybridrl.algos.distillation`'s."""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.algos.distillation import forward_kl_topk, student_topk_log_probs, topk_overlap

__all__ = ["compute_forward_kl_topk"]


def compute_forward_kl_topk(
    student_logits: torch.Tensor,
    teacher_topk_log_probs: torch.Tensor,
    teacher_topk_ids: torch.Tensor,
    config: Any,
    data_format: str = "thd",
) -> dict[str, torch.Tensor]:
    """Per-token top-k forward KL and diagnostics (verl's signature).

    Args:
        student_logits: ``[1, N, V]`` the packed sequences' logits.
        teacher_topk_log_probs, teacher_topk_ids: nested ``[B, j, K]`` (j: each sequence's tokens, N in all) or
            ``[1, N, K]``.
        config: the ``distillation`` section (reads ``distillation_loss.log_prob_min_clamp``).

    Returns:
        ``distillation_losses, student_mass, teacher_mass, overlap_count, overlap_token_advantage``, each ``[1, N]``.
    """
    if teacher_topk_log_probs.is_nested:
        teacher_topk_log_probs = teacher_topk_log_probs.values().unsqueeze(0)
        teacher_topk_ids = teacher_topk_ids.values().unsqueeze(0)
    student_log_probs, student_ids = student_topk_log_probs(student_logits, teacher_topk_ids)
    clamp = config.distillation_loss.log_prob_min_clamp
    losses, student_mass, teacher_mass = forward_kl_topk(student_log_probs, teacher_topk_log_probs, clamp)
    overlap_count, overlap_advantage = topk_overlap(teacher_topk_ids, student_ids, teacher_topk_log_probs.float(),
                                                    student_log_probs)
    return {"distillation_losses": losses, "student_mass": student_mass, "teacher_mass": teacher_mass,
            "overlap_count": overlap_count, "overlap_token_advantage": overlap_advantage}
