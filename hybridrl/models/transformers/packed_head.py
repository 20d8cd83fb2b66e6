"""The output head (LM head) of a CPU rollout as a oneDNN float32 matmul over a prepacked weight.

Each decode step multiplies ``[rows, hidden]`` by the ``[vocab, hidden]`` head weight. With few rows and a large
vocabulary (SmolLM2: 32 × 576 by 49152 × 576) ``F.linear`` runs at about half the rate of the layers' matmuls on CPU:
32 ms a step on 2 cores, a fifth of the step. oneDNN with the weight reordered once into its blocked layout does the
same product in 15 ms (same values up to float summation order: max |Δ| 2e-6 on logits of magnitude 2.5).

``packed_output_head(model)`` swaps the head's ``forward`` for the packed product for the duration of a decode
call; the model's own code around the head (slicing, soft-capping, scaling) is untouched. The packed copy lives for
that call only (packing costs ~30 ms for SmolLM2's head) and is rebuilt if the weight changes meanwhile (new storage
or an in-place update), so it is never stale.
Only a CPU ``nn.Linear`` head without bias and with ≥ ``MIN_PACKED_VOCAB`` outputs, outside autograd, takes this
path; anything else runs as is (a small head gains nothing and pays the conversions). A bf16/fp16 head (a bf16
rollout) is packed as a float32 copy and gives float32 logits: the rollout log-probs keep fp32 logits (bf16 logits
of magnitude 16–32 are 0.125 apart), at 15 ms a step for SmolLM2's head against 9 ms for the bf16 ``F.linear``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

MIN_PACKED_VOCAB = 8192  # smaller heads (the random test models' 512) keep F.linear
_PACKED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def packable_head(model: nn.Module, min_vocab: int = MIN_PACKED_VOCAB) -> nn.Linear | None:
    """The model's output head when the packed path applies to it (``min_vocab`` outputs or more), else None."""
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if not isinstance(head, nn.Linear) or head.bias is not None or "forward" in head.__dict__:
        return None  # (an instance-level forward belongs to someone else's hook: leave it alone)
    if head.out_features < min_vocab:
        return None
    weight = head.weight
    if weight.device.type != "cpu" or weight.dtype not in _PACKED_DTYPES or not torch.backends.mkldnn.is_available():
        return None
    return head


class PackedLinearForward:
    """``forward`` of a bias-free ``nn.Linear`` through ``mkldnn_linear`` with the weight prepacked.

    Call it on ``x [..., in_features]`` (fp32, bf16 or fp16); returns ``[..., out_features]`` (float32, dense).
    """

    def __init__(self, linear: nn.Linear) -> None:
        self.linear = linear
        self._packed: torch.Tensor | None = None
        self._key: tuple[int, int] | None = None

    def packed_weight(self) -> torch.Tensor:
        """The float32 oneDNN copy of the weight, rebuilt when the weight's storage or version changed."""
        weight = self.linear.weight
        key = (weight.data_ptr(), weight._version)
        if key != self._key:
            self._packed = weight.detach().float().to_mkldnn()
            self._key = key
        return self._packed

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dtype not in _PACKED_DTYPES:
            return nn.functional.linear(x, self.linear.weight)
        rows = x.reshape(-1, x.shape[-1]).float().contiguous()
        out = torch._C._nn.mkldnn_linear(rows.to_mkldnn(), self.packed_weight(), None).to_dense()
        return out.reshape(*x.shape[:-1], out.shape[-1])


@contextlib.contextmanager
def packed_output_head(model: nn.Module, enabled: bool = True, min_vocab: int = MIN_PACKED_VOCAB) -> Iterator[bool]:
    """Within the block, the model's head runs the packed product (yields whether it does)."""
    head = packable_head(model, min_vocab) if enabled else None
    if head is None:
        yield False
        return
    head.forward = PackedLinearForward(head)  # packed once per block (~30 ms for 49152 × 576), dropped after
    try:
        yield True
    finally:
        del head.forward  # back to nn.Linear.forward
