"""Check ``worker``: ``ActorRolloutRefWorker`` (FSDP2, bf16 compute) without Ray — a log-prob pass, one actor update.

The worker joins a 1-rank group from environment variables (``single_rank.py``; NCCL on CUDA). PASS: the log-probs
are finite and ≤ 0, the update's loss and grad norm are finite, and the log-probs move after the update.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from gpu_check.outcome import Outcome
from gpu_check.single_rank import actor_update, build_actor_worker, first, join_single_rank_group
from gpu_check.workload import model_dir, ppo_batch, sizes_for


def run(context: dict[str, Any]) -> Outcome:
    join_single_rank_group(context["device"])
    shape = sizes_for(context).worker_batch
    worker = build_actor_worker(model_dir(context), shape, "actor")
    vocab = len(worker.tokenizer)
    data = ppo_batch(shape, vocab, seed=1)
    mask = data.batch["response_mask"].bool()
    start = time.perf_counter()
    before = worker.compute_log_prob(ppo_batch(shape, vocab, seed=1)).batch["old_log_probs"]
    log_prob_s = time.perf_counter() - start
    start = time.perf_counter()
    metrics = actor_update(worker, data)
    update_s = time.perf_counter() - start
    after = worker.compute_log_prob(ppo_batch(shape, vocab, seed=1)).batch["old_log_probs"]
    change = (after - before)[mask].abs().max().item()
    figures = {
        "backend": torch.distributed.get_backend(),
        "param_dtype": "bf16",
        "log_prob_mean": before[mask].mean().item(),
        "log_prob_s": round(log_prob_s, 3),
        "update_s": round(update_s, 3),
        "pg_loss": first(metrics["actor/pg_loss"]),
        "grad_norm": first(metrics["actor/grad_norm"]),
        "log_prob_max_change_after_update": change,
        "max_memory_allocated_gb": metrics.get("perf/max_memory_allocated_gb"),
        "cudnn_sdp_enabled": torch.backends.cuda.cudnn_sdp_enabled(),
    }
    finite = bool(torch.isfinite(before[mask]).all()) and bool((before[mask] <= 0).all())
    if not finite:
        return Outcome("FAIL", "log-probs not finite or > 0", figures)
    if not (math.isfinite(figures["pg_loss"]) and math.isfinite(figures["grad_norm"])):
        return Outcome("FAIL", f"update not finite: pg_loss {figures['pg_loss']}, grad_norm {figures['grad_norm']}",
                       figures)  # fmt: skip
    if change <= 0.0:
        return Outcome("FAIL", "the update left the log-probs unchanged", figures)
    return Outcome(
        "PASS",
        f"no Ray, {figures['backend']}, bf16: log-prob pass {log_prob_s:.2f} s (mean {figures['log_prob_mean']:.2f}),"
        f" update {update_s:.2f} s (grad_norm {figures['grad_norm']:.3g}), log-probs moved by up to {change:.2g}",
        figures,
    )
