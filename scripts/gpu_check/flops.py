"""FLOPs of a dense decoder-only transformer step, and the bf16 dense peaks of the GPUs the kit knows.

Notation (per layer unless said): h hidden size, q = heads · head_dim, kv = key-value heads · head_dim,
i MLP intermediate size, L layers, V vocabulary, s_j length of sequence j, T = Σ_j s_j tokens.

    matmul parameters  N = L · (h·q + 2·h·kv + q·h + 3·h·i) + V·h    (q, k, v, o projections; gate, up, down; lm_head)
    forward  FLOPs     = 2·N·T + 4·L·q·Σ s_j²                         (QKᵀ and A·V, each 2·s²·q, causal not halved)
    training FLOPs     = 3 × forward                                   (backward = 2 × forward; no recomputation)

This is the usual convention (the "6·N·T + 12·L·q·Σs²" of verl's flops counter and of the PaLM paper's MFU), except
that the input embedding, a lookup, is not counted. MFU = achieved FLOP/s ÷ the device's bf16 dense peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# bf16 dense tensor-core peaks of SXM boards in TFLOP/s. The Hopper datasheets give 2:4-sparsity figures; dense is
# half. NVIDIA H200 and H100 datasheets: "BF16 Tensor Core 1,979 TFLOPS" for the SXM board, footnoted "with sparsity".
# NVIDIA A100 datasheet: BF16 Tensor Core 312 TFLOPS (624 with sparsity). NVL and PCIe boards run lower clocks and
# power: they are not in the table (pass --peak-tflops).
BF16_DENSE_PEAK_TFLOPS: tuple[tuple[str, float, str], ...] = (
    ("H200", 989.5, "NVIDIA H200 datasheet, SXM: BF16 Tensor Core 1,979 TFLOPS with sparsity, halved for dense"),
    ("H100", 989.5, "NVIDIA H100 datasheet, SXM: BF16 Tensor Core 1,979 TFLOPS with sparsity, halved for dense"),
    ("A100", 312.0, "NVIDIA A100 datasheet: BF16 Tensor Core 312 TFLOPS dense"),
)
_OTHER_BOARDS = ("NVL", "PCIe")


def bf16_dense_peak(device_name: str) -> tuple[float, str] | None:
    """``(TFLOP/s, source)`` for the first table entry whose name is in ``device_name``; None when unknown."""
    if any(board in device_name for board in _OTHER_BOARDS):
        return None
    for name, tflops, source in BF16_DENSE_PEAK_TFLOPS:
        if name in device_name:
            return tflops, source
    return None


@dataclass(frozen=True)
class DecoderShape:
    """The sizes of the FLOP count (see the module notation)."""

    hidden: int
    q_dim: int
    kv_dim: int
    intermediate: int
    layers: int
    vocab: int

    @classmethod
    def from_hf_config(cls, config: Any) -> DecoderShape:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(
            hidden=config.hidden_size,
            q_dim=config.num_attention_heads * head_dim,
            kv_dim=config.num_key_value_heads * head_dim,
            intermediate=config.intermediate_size,
            layers=config.num_hidden_layers,
            vocab=config.vocab_size,
        )

    def matmul_parameters(self) -> int:
        """N: the weights every token multiplies by (see the module notation)."""
        h, q, kv, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        return self.layers * (h * q + 2 * h * kv + q * h + 3 * h * i) + self.vocab * h


def forward_flops(shape: DecoderShape, sequence_lengths: list[int]) -> int:
    """2·N·T + 4·L·q·Σ s² for one forward over the sequences."""
    tokens = sum(sequence_lengths)
    squares = sum(length * length for length in sequence_lengths)
    return 2 * shape.matmul_parameters() * tokens + 4 * shape.layers * shape.q_dim * squares


def training_flops(shape: DecoderShape, sequence_lengths: list[int]) -> int:
    """Forward + backward (3 × forward) without activation recomputation."""
    return 3 * forward_flops(shape, sequence_lengths)
