"""Check ``offload``: ``actor.fsdp_config.param_offload`` / ``optimizer_offload`` free device memory between calls.

Two actors of the same ~25M-parameter model, one after the other in one process, each measured as the growth of
``torch.cuda.memory_allocated`` from just before it is built to just after its first update:

    resident  = growth without offload     (fp32 weights + Adam moments stay on the GPU: ~12 bytes a parameter)
    offloaded = growth with both offloads  (they went back to the CPU after the call)

PASS: resident − offloaded ≥ half of 12 bytes × parameters, and a second update after the reload is finite. On the
CPU dry run offload is a no-op (nothing to free): the offloaded actor still trains, the memory claim is a SKIP.
"""

from __future__ import annotations

import gc
import math
from typing import Any

import torch

from gpu_check.outcome import Outcome
from gpu_check.single_rank import actor_update, build_actor_worker, first, join_single_rank_group
from gpu_check.workload import model_dir, parameter_count, ppo_batch, sizes_for

BYTES_PER_PARAMETER = 12  # fp32 weight (4) + Adam exp_avg (4) + exp_avg_sq (4)
OFFLOAD_KEYS = ("actor_rollout_ref.actor.fsdp_config.param_offload=True",
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True")  # fmt: skip


def _allocated(device: str) -> int:
    return torch.cuda.memory_allocated() if device == "cuda" else 0


def growth_after_update(model_path: str, context: dict[str, Any], *extra: str) -> tuple[int, list[float]]:
    """Bytes allocated on the device by an actor built and updated twice; the grad norms of both updates."""
    device, shape = context["device"], sizes_for(context).worker_batch
    gc.collect()
    before = _allocated(device)
    worker = build_actor_worker(model_path, shape, "actor", *extra)
    vocab = len(worker.tokenizer)
    norms = [first(actor_update(worker, ppo_batch(shape, vocab, seed=seed))["actor/grad_norm"]) for seed in (1, 2)]
    grown = _allocated(device) - before
    del worker
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return grown, norms


def run(context: dict[str, Any]) -> Outcome:
    join_single_rank_group(context["device"])
    model_path = model_dir(context, sizes_for(context).offload_model)
    parameters = parameter_count(model_path)
    offloaded, offload_norms = growth_after_update(model_path, context, *OFFLOAD_KEYS)
    on_cuda = context["device"] == "cuda"  # on the CPU both would measure 0: build the resident actor on CUDA only
    resident, resident_norms = growth_after_update(model_path, context) if on_cuda else (0, [])
    expected = BYTES_PER_PARAMETER * parameters
    figures = {"parameters": parameters, "resident_mb": resident / 2**20, "offloaded_mb": offloaded / 2**20,
               "expected_state_mb": expected / 2**20, "freed_mb": (resident - offloaded) / 2**20,
               "grad_norms_offloaded": offload_norms, "grad_norms_resident": resident_norms}  # fmt: skip
    if not all(math.isfinite(norm) for norm in offload_norms):
        return Outcome("FAIL", f"update with offload not finite: grad norms {offload_norms}", figures)
    if not on_cuda:
        return Outcome("SKIP", f"no CUDA: offload is a no-op on CPU; the offloaded actor ({parameters} params) ran 2 "
                               f"updates (grad norms {offload_norms[0]:.3g}, {offload_norms[1]:.3g})", figures)  # fmt: skip
    summary = (f"{parameters / 1e6:.1f}M params: resident {figures['resident_mb']:.0f} MB, offloaded "
               f"{figures['offloaded_mb']:.0f} MB (freed {figures['freed_mb']:.0f} of ~{figures['expected_state_mb']:.0f}"
               f" MB expected); 2 updates after reload finite")  # fmt: skip
    if resident - offloaded < expected / 2:
        return Outcome("FAIL", summary, figures)
    return Outcome("PASS", summary, figures)
