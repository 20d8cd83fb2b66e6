"""AdamW, verl's LR schedules, and a guarded optimizer step.

LR schedules (verl ``torch_functional``), as multipliers of ``optim.lr`` at scheduler step ``s``
(``W`` = warmup steps, ``T`` = ``total_training_steps``, ``m`` = ``min_lr_ratio``, ``c`` = ``num_cycles``):

    constant:  s / max(1, W) for s < W, else 1
    cosine:    s / max(1, W)                                              for s < W
               max(0, (1 - m)/2 · cos(2π c · (s - W) / max(1, T - W)) + (1 + m)/2)   otherwise

Deviation: verl 0.4/0.5's constant schedule is ``min(1, s / max(1, W))``, which gives lr 0 for the
first update when ``W == 0``; later verl (and HF) return 1 once ``s >= W``. hybridrl follows the fix;
the two agree whenever ``W >= 1``.

Warmup steps: ``lr_warmup_steps`` when it is >= 0, else ``int(lr_warmup_steps_ratio · T)`` (verl 0.5:
the key defaults to -1, meaning "use the ratio").
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

logger = logging.getLogger(__name__)

WARMUP_STYLES = ("constant", "cosine")


_FUSED_CPU_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def build_optimizer(module: nn.Module, optim_config: Any) -> torch.optim.AdamW:
    """``AdamW(params, lr, betas, weight_decay)`` from ``*.optim`` (every key from the YAML).

    Only parameters that require grad are optimised (all of them, except with LoRA: the adapters). On CPU the
    step is torch's fused AdamW kernel (:func:`fused_on_cpu`); elsewhere torch's default implementation.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        params,
        lr=float(optim_config["lr"]),
        betas=tuple(optim_config["betas"]),
        weight_decay=float(optim_config["weight_decay"]),
        fused=fused_on_cpu(params) or None,
    )


def fused_on_cpu(params: list[torch.Tensor]) -> bool:
    """Whether every parameter is a floating CPU tensor (plain or FSDP2's DTensor): then AdamW runs fused.

    torch's default on CPU is a Python loop of per-tensor ops (``foreach`` is a CUDA default); the fused kernel
    makes one pass per tensor: 0.08 s against 0.24 s a step for SmolLM2-135M's fp32 weights, 2 threads
    (benchmarks/results/2026-12-05-perf-fused-adamw-and-fp32-attention-in-the-bf16.md). transformers' Trainer (and so
    TRL) uses it by default from torch 2.8 on. Same update up to float rounding
    (tests/workers/engine/test_engine_optim_on_cpu.py).
    """
    return bool(params) and all(p.device.type == "cpu" and p.dtype in _FUSED_CPU_DTYPES for p in params)


def get_constant_schedule_with_warmup(optimizer: torch.optim.Optimizer, num_warmup_steps: int) -> LambdaLR:
    """Linear warmup from 0 to ``lr`` over ``num_warmup_steps``, then constant."""

    def lr_lambda(step: int) -> float:
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        return 1.0

    return LambdaLR(optimizer, lr_lambda)


def get_cosine_schedule_with_warmup(
    optimizer: torch.optim.Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    min_lr_ratio: float = 0.0,
    num_cycles: float = 0.5,
) -> LambdaLR:
    """Linear warmup, then a cosine from ``lr`` down to ``min_lr_ratio · lr`` (``num_cycles=0.5``: half a wave)."""
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"optim.min_lr_ratio={min_lr_ratio} must be in [0, 1].")
    coef = (1.0 - min_lr_ratio) * 0.5
    intercept = (1.0 + min_lr_ratio) * 0.5

    def lr_lambda(step: int) -> float:
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        progress = float(step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        x = math.cos(math.pi * float(num_cycles) * 2.0 * progress)
        return max(0.0, x * coef + intercept)

    return LambdaLR(optimizer, lr_lambda)


def num_warmup_steps(optim_config: Any, total_training_steps: int | None = None) -> int:
    """``lr_warmup_steps`` if >= 0, else ``int(lr_warmup_steps_ratio * total_training_steps)``.

    ``total_training_steps``: the run's horizon from the batch plan; None reads ``optim.total_training_steps``.
    """
    steps = int(optim_config["lr_warmup_steps"])
    if steps >= 0:
        return steps
    ratio = float(optim_config["lr_warmup_steps_ratio"])
    if total_training_steps is None:
        total_training_steps = int(optim_config["total_training_steps"])
    return int(ratio * total_training_steps)


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer, optim_config: Any, total_training_steps: int | None = None
) -> LambdaLR:
    """verl's scheduler from ``*.optim.{warmup_style, lr_warmup_steps(_ratio), ...}``; the horizon is
    ``total_training_steps`` (the batch plan's) or, when None, ``optim.total_training_steps``."""
    style = optim_config["warmup_style"]
    if total_training_steps is None:
        total_training_steps = int(optim_config["total_training_steps"])
    warmup = num_warmup_steps(optim_config, total_training_steps)
    if style == "constant":
        return get_constant_schedule_with_warmup(optimizer, warmup)
    if style == "cosine":
        total = total_training_steps
        if total <= 0:
            raise ValueError(
                f"optim.warmup_style=cosine needs optim.total_training_steps > 0 (got {total}); the batch plan sets it from the dataset "
                "length, or set it explicitly."
            )
        return get_cosine_schedule_with_warmup(
            optimizer,
            warmup,
            total,
            min_lr_ratio=float(optim_config["min_lr_ratio"]),
            num_cycles=float(optim_config["num_cycles"]),
        )
    raise ValueError(f"optim.warmup_style={style!r} is not supported; use one of {WARMUP_STYLES}.")


def clip_grad_norm(module: nn.Module, max_norm: float) -> float:
    """Clip gradients in place; return the total grad norm before clipping as a float.

    Under FSDP2 the norm is a DTensor (a reduction over shards): ``full_tensor()`` makes it a plain
    number equal on every rank. FSDP1 modules clip with their own collective-aware method.
    """
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.tensor import DTensor

    if isinstance(module, FSDP):
        norm = module.clip_grad_norm_(max_norm=max_norm)
    else:
        norm = torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm=max_norm)
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()
    return float(norm)


def clip_grad_and_step(module: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float) -> tuple[float, bool]:
    """Clip grads to ``max_norm`` and step; skip the step when the grad norm is not finite.

    Returns:
        ``(grad_norm, stepped)``; on a non-finite norm the grads are zeroed, the optimizer does not
        step, and ``optimizer.num_skipped_steps`` (an int attribute this function keeps) is incremented.
    """
    grad_norm = clip_grad_norm(module, max_norm)
    if not math.isfinite(grad_norm):
        logger.warning("grad_norm is not finite (%s); skipping this optimizer step.", grad_norm)
        optimizer.zero_grad()
        optimizer.num_skipped_steps = getattr(optimizer, "num_skipped_steps", 0) + 1  # type: ignore[attr-defined]
        return grad_norm, False
    optimizer.step()
    return grad_norm, True
