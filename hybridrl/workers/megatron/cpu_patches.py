"""The CPU patches megatron-core needs to run without CUDA (``trainer.device=cpu`` only; never on GPU).

megatron-core 0.16 assumes CUDA in a few calls. Each patch below names the call that needs it and how to drop
it (when megatron-core runs those calls on the tensor's own device). Measured in
``cpu-facts.md`` ("Megatron-LM (megatron-core) on this CPU"): with them TP=2 equals TP=1 to 1.5e-7 and DP=2 with
megatron-core's DDP equals one rank. Fused kernels and apex fall back to torch by themselves; the
TransformerEngine layer spec cannot run on CPU (the model uses the local spec there).

P1  ``torch.cuda.current_device()`` (~175 calls: grad buffers, TP gathers, rotary embeddings, vocab-parallel
    cross entropy) → ``torch.device("cpu")``. Drop when megatron-core allocates on ``param.device``.
P2  the CUDA RNG tracker (``model_parallel_cuda_manual_seed``; dropouts' ``get_cuda_rng_tracker().fork()``) →
    the inference tracker, which forks no CUDA generator. Drop when ``CudaRNGStatesTracker`` takes a device.
P3  the optimizer: ``FP32Optimizer.__init__`` builds ``torch.tensor([1.0], device="cuda")`` and ``clip_grads``
    asserts ``param.grad.type() == "torch.cuda.FloatTensor"`` → a ``TorchFunctionMode`` that maps
    ``device="cuda"`` to CPU, makes ``Tensor.cuda()`` a no-op and reports ``torch.cuda.*`` from ``Tensor.type()``.
    Drop when the optimizer and ``clip_grads`` stop naming CUDA.
P5  the pipeline schedules' p2p exchange (``pipeline_parallel/p2p_communication.py``: ``_communicate_shapes``
    with ``variable_seq_lengths``, ``_communicate`` with ``batch_p2p_sync``) calls ``torch.cuda.synchronize()``
    after gloo's ``batch_isend_irecv`` → a no-op (gloo's requests are already waited on). Drop it when
    megatron-core guards those calls by device.
(P4, megatron-core 0.19 only: ``start_grad_sync`` calls ``torch.cuda.current_stream()``; not needed on 0.16.)
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["apply_cpu_patches", "cpu_patches_applied"]

_state = {"applied": False, "mode": None}


def cpu_patches_applied() -> bool:
    """Whether :func:`apply_cpu_patches` ran in this process."""
    return bool(_state["applied"])


def apply_cpu_patches() -> None:
    """Apply P1–P3 and P5 once per process (idempotent). Call only when ``trainer.device=cpu``."""
    if _state["applied"]:
        return
    if torch.cuda.is_available():
        raise RuntimeError("megatron CPU patches must not run on a CUDA machine (trainer.device=cpu only)")
    _patch_current_device()
    _patch_rng_tracker()
    torch.cuda.synchronize = lambda *args, **kwargs: None  # type: ignore[assignment]  # P5
    mode = _CudaToCpuMode()
    mode.__enter__()  # P3 stays on for the life of the (worker) process
    _state.update(applied=True, mode=mode)


def _patch_current_device() -> None:
    # P1: megatron-core allocates buffers on torch.cuda.current_device()
    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment]


def _patch_rng_tracker() -> None:
    # P2: model_parallel_cuda_manual_seed and dropout forks use the CUDA RNG tracker
    from megatron.core import tensor_parallel

    def seed_without_cuda(seed: int, *args: Any, **kwargs: Any) -> None:
        torch.manual_seed(seed)
        tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)

    tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    tensor_parallel.model_parallel_cuda_manual_seed = seed_without_cuda
    tensor_parallel.random.model_parallel_cuda_manual_seed = seed_without_cuda


def _is_cuda(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return isinstance(device, str) and device.startswith("cuda")


class _CudaToCpuMode(TorchFunctionMode):
    """P3: ``device="cuda"`` → CPU, ``Tensor.cuda()`` → self, ``Tensor.type()`` → the ``torch.cuda.*`` name."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            return func(*args).replace("torch.", "torch.cuda.", 1)
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = torch.device("cpu")
        if func is torch.Tensor.to and args and _is_cuda(args[1] if len(args) > 1 else None):
            args = (args[0], torch.device("cpu"), *args[2:])
        return func(*args, **kwargs)
