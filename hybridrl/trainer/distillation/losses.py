"""verl 0.9's ``verl.trainer.distillation.losses``: its public names over :mod:`hybridrl.algos.distillation`.

The pure math lives in ``hybridrl.algos.distillation`` (the actor's worker, below the trainer, computes the loss);
this module keeps verl's import path, its loss-mode tables and its metric collector of the top-k loss.
"""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.algos.distillation import (  # noqa: F401  (re-exported at verl's path)
    ESTIMATOR_LOSS_MODES,
    TOPK_LOSS_MODES,
    combine_with_task_loss,
    distillation_loss,
    forward_kl_topk,
    reverse_kl_estimate,
    student_topk_log_probs,
    topk_overlap,
)

__all__ = [
    "ESTIMATOR_LOSS_MODES", "TOPK_LOSS_MODES", "combine_with_task_loss", "compute_forward_kl_topk",
    "distillation_loss", "forward_kl_topk", "is_distillation_enabled", "reverse_kl_estimate",
    "student_topk_log_probs", "topk_overlap",
]


def is_distillation_enabled(config: Any) -> bool:
    """``distillation.enabled`` of a ``distillation`` section (None: disabled), as verl."""
    return config is not None and bool(config.enabled)


def _response_values(values: torch.Tensor, data: Any) -> torch.Tensor:
    """``[N]`` values of the packed (prompt + response) tokens → ``[B, R]`` at the response tokens, zero-padded.

    The output at position i predicts token i + 1, so a response's values start one token before it (verl's
    ``no_padding_2_padding``)."""
    prompt_width = data["prompts"].shape[1]
    attention_mask = data["attention_mask"]
    prompt_lens = attention_mask[:, :prompt_width].sum(dim=1)
    response_lens = attention_mask[:, prompt_width:].sum(dim=1)
    ends = (prompt_lens + response_lens).cumsum(dim=0)
    width = data["responses"].shape[1]
    rows = [torch.nn.functional.pad(values[end - length - 1 : end - 1], (0, int(width - length)))
            for length, end in zip(response_lens.tolist(), ends.tolist(), strict=True)]
    return torch.stack(rows)


def compute_forward_kl_topk(config: Any, distillation_config: Any, model_output: dict, data: Any) -> tuple:
    """The top-k loss's per-token losses ``[B, R]`` (clamped at 0) and verl's ``distillation/*`` metrics from the
    packed outputs of :func:`hybridrl.trainer.distillation.fsdp.losses.compute_forward_kl_topk` (verl's signature).
    """
    mask = data["response_mask"].bool()
    out = {key: _response_values(value, data) for key, value in model_output.items()}
    student_mass, teacher_mass = out["student_mass"][mask], out["teacher_mass"][mask]
    metrics: dict[str, float] = {
        "distillation/student_mass": float(student_mass.mean()),
        "distillation/student_mass_min": float(student_mass.min()),
        "distillation/student_mass_max": float(student_mass.max()),
        "distillation/teacher_mass": float(teacher_mass.mean()),
        "distillation/teacher_mass_min": float(teacher_mass.min()),
        "distillation/teacher_mass_max": float(teacher_mass.max()),
    }
    if "overlap_count" in out:
        count = out["overlap_count"]
        topk = distillation_config.distillation_loss.topk
        metrics["distillation/overlap_ratio"] = float(count[mask].float().mean()) / topk
        overlapping = mask & (count > 0)
        advantage = out["overlap_token_advantage"][overlapping]
        metrics["distillation/overlap_token_advantage"] = float(advantage.mean()) if advantage.numel() else 0.0
    return out["distillation_losses"].clamp_min(0.0), metrics
