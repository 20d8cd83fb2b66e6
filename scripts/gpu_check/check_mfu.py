"""Check ``mfu``: a bf16 matmul's FLOP/s and the actor's training FLOP/s against the device's bf16 dense peak.

1. ``n × n @ n × n`` in bf16 (n = 8192 on the GPU): 3 warm-ups, 10 timed (CUDA events), 2·n³ FLOPs each.
2. ``ActorRolloutRefWorker`` (FSDP2, bf16 compute, no gradient checkpointing) on a locally built random 0.40B
   Qwen2 (``workload.MFU_MODEL``), 32 unpadded sequences of 1024 tokens, micro batch 8: after one warm-up, two timed
   ``compute_log_prob`` (forward) and two ``update_actor`` (one optimizer step over the 32) calls, end to end as a
   user calls them. FLOPs per ``flops.py``; MFU = FLOP/s ÷ peak (``flops.BF16_DENSE_PEAK_TFLOPS`` or
   ``--peak-tflops``), also given as a fraction of the measured matmul rate.

PASS on a GPU when every figure is finite and positive; the dry run measures the CPU path (tiny sizes) and SKIPs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from gpu_check.flops import DecoderShape, bf16_dense_peak, forward_flops, training_flops
from gpu_check.outcome import Outcome
from gpu_check.single_rank import actor_update, build_actor_worker, join_single_rank_group
from gpu_check.workload import model_dir, ppo_batch, sizes_for

TIMED_CALLS = 2


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def matmul_tflops(n: int, device: str, warmup: int = 3, repeats: int = 10) -> float:
    """Mean TFLOP/s of ``repeats`` bf16 ``[n, n] @ [n, n]`` products on random data (2·n³ FLOPs each)."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(warmup):
        a @ b
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    _synchronize(device)
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e12


def mean_seconds(call: Callable[[], Any], device: str, repeats: int = TIMED_CALLS) -> float:
    """Mean wall seconds of ``call`` (already warmed up), synchronised before and after."""
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    _synchronize(device)
    return (time.perf_counter() - start) / repeats


def actor_rates(context: dict[str, Any]) -> dict[str, Any]:
    """Forward and update seconds and FLOP counts of the actor on the MFU model and batch."""
    device, sizes = context["device"], sizes_for(context)
    shape = sizes.mfu_batch
    start = time.perf_counter()
    worker = build_actor_worker(model_dir(context, sizes.mfu_model), shape, "actor")
    build_s = time.perf_counter() - start
    data = ppo_batch(shape, len(worker.tokenizer), seed=3, ragged=False)
    actor_update(worker, data)  # warm-up forward and update (allocations, autotuning); data keeps its old_log_probs
    forward_s = mean_seconds(lambda: worker.compute_log_prob(data), device)
    update_s = mean_seconds(lambda: worker.update_actor(data), device)
    decoder = DecoderShape.from_hf_config(worker.hf_config)
    lengths = [shape.prompt_length + shape.response_length] * shape.batch_size
    return {"model_build_and_load_s": round(build_s, 1), "matmul_parameters": decoder.matmul_parameters(),
            "tokens_per_call": sum(lengths), "forward_s": forward_s, "update_s": update_s,
            "forward_flops": forward_flops(decoder, lengths), "update_flops": training_flops(decoder, lengths),
            "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None}  # fmt: skip


def run(context: dict[str, Any]) -> Outcome:
    join_single_rank_group(context["device"])
    device = context["device"]
    matmul = matmul_tflops(sizes_for(context).matmul_size, device)
    figures: dict[str, Any] = {"matmul_n": sizes_for(context).matmul_size, "matmul_bf16_tflops": matmul,
                               **actor_rates(context)}  # fmt: skip
    figures["forward_tflops"] = figures["forward_flops"] / figures["forward_s"] / 1e12
    figures["update_tflops"] = figures["update_flops"] / figures["update_s"] / 1e12
    figures["update_fraction_of_matmul"] = figures["update_tflops"] / matmul
    rates = (f"matmul {matmul:.3g} TFLOP/s; {figures['matmul_parameters'] / 1e6:.0f}M-param actor: forward "
             f"{figures['forward_tflops']:.3g}, update {figures['update_tflops']:.3g} TFLOP/s")  # fmt: skip
    if device != "cuda":
        return Outcome("SKIP", f"no CUDA: MFU needs the GPU; CPU path ran: {rates}", figures)
    name = torch.cuda.get_device_name(0)
    peak = (context["peak_tflops"], "--peak-tflops") if context.get("peak_tflops") else bf16_dense_peak(name)
    figures["device_name"] = name
    if peak is not None:
        figures.update(peak_tflops=peak[0], peak_source=peak[1], update_mfu=figures["update_tflops"] / peak[0],
                       forward_mfu=figures["forward_tflops"] / peak[0], matmul_fraction_of_peak=matmul / peak[0])  # fmt: skip
    numbers = [value for key, value in figures.items() if key.endswith(("_tflops", "_s"))]
    if not all(isinstance(v, float) and 0 < v < float("inf") for v in numbers):
        return Outcome("FAIL", f"non-finite or zero figures: {rates}", figures)
    if peak is None:
        return Outcome("PASS", f"{rates}; no peak known for {name!r} (pass --peak-tflops)", figures)
    return Outcome("PASS", f"{rates}; update MFU {figures['update_mfu']:.1%} of {peak[0]:.0f} (bf16 dense, {name}), "
                           f"matmul {figures['matmul_fraction_of_peak']:.0%} of peak", figures)  # fmt: skip
