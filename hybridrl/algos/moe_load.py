"""Mixture-of-experts load balance: expert counts per layer and the violation metrics verl 0.9 logs.

Notation:
    N: routed tokens, L: MoE layers, k: experts per token (router top-k), E: experts per layer.
    c_{l,e}: assignments of expert e in layer l (each token adds k, one per chosen expert).
    f_{l,e} = c_{l,e} / Σ_e c_{l,e}: the expert's share of the layer's assignments.
    vio_{l,e} = E · f_{l,e} − 1: 0 when perfectly balanced (every share 1/E), E − 1 when one expert takes all.

Metrics (verl 0.9's names, ``prefix`` = ``rollout/moe`` there):
    {prefix}/max_vio/layer_{l} = max_e vio_{l,e}        (the most overloaded expert)
    {prefix}/min_vio/layer_{l} = min_e vio_{l,e}        (−1 when an expert gets nothing)
    {prefix}/avg_vio/layer_{l} = mean_e |vio_{l,e}|
    {prefix}/{max,min,avg}_vio/max and /avg: the max and the mean of each over the layers.
"""

from __future__ import annotations

import torch

__all__ = ["expert_load_counts", "load_balance_metrics"]


def expert_load_counts(expert_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Assignments per expert per layer.

    Args:
        expert_ids: ``[N, L, k]`` int expert ids chosen for each token in each layer.
        num_experts: ``E``.

    Returns:
        ``counts [L, E]`` int64, ``counts.sum(-1) == N * k`` in every layer.
    """
    if expert_ids.dim() != 3:
        raise ValueError(f"expert_ids must be [tokens, layers, top_k], got shape {tuple(expert_ids.shape)}")
    ids = expert_ids.detach().to(device="cpu", dtype=torch.long)
    if ids.numel() and (ids.min() < 0 or ids.max() >= num_experts):
        raise ValueError(f"expert ids outside [0, {num_experts}): min {int(ids.min())}, max {int(ids.max())}")
    # bincount per layer: no [N, L, k, E] one-hot
    return torch.stack(
        [torch.bincount(ids[:, layer].flatten(), minlength=num_experts) for layer in range(ids.shape[1])]
    )


def load_balance_metrics(counts: torch.Tensor, prefix: str) -> dict[str, float]:
    """verl 0.9's per-layer and summary violation metrics of ``counts [L, E]`` (see the module docstring)."""
    if counts.numel() == 0:
        return {}
    share = counts.float() / counts.float().sum(dim=1, keepdim=True).clamp_min(1.0)  # f [L, E]
    violation = share * counts.shape[1] - 1.0  # vio = E·f − 1
    per_layer = {
        "max_vio": violation.max(dim=1).values,
        "min_vio": violation.min(dim=1).values,
        "avg_vio": violation.abs().mean(dim=1),
    }
    metrics: dict[str, float] = {}
    for name, values in per_layer.items():
        for layer, value in enumerate(values.tolist()):
            metrics[f"{prefix}/{name}/layer_{layer}"] = value
        metrics[f"{prefix}/{name}/max"] = float(values.max())
        metrics[f"{prefix}/{name}/avg"] = float(values.mean())
    return metrics
