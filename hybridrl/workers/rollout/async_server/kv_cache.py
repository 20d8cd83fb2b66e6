"""Row-level surgery on a left-padded Hugging Face ``DynamicCache`` for continuous batching.

Every layer holds ``keys/values [B, H, T, D]``; row ``b`` is left-padded: its real tokens are the last ones
and ``attention_mask[b, :T]`` is 0 on the padding. Merging two caches pads the shorter one on the left of the
time axis with zeros (masked out by a 0 in the attention mask) and stacks the rows.
"""

from __future__ import annotations

import torch


def _layers(cache: object) -> list:
    layers = list(getattr(cache, "layers", []))
    for layer in layers:
        if getattr(layer, "is_sliding", False):
            raise NotImplementedError(
                "the hf async server keeps a left-padded full-attention KV cache; sliding-window layers are not "
                "supported (use rollout.name=vllm for this model)"
            )
    return layers


def cache_length(cache: object) -> int:
    """Time length ``T`` of the cache (0 when empty)."""
    return int(cache.get_seq_length()) if cache is not None else 0


def left_pad_time(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pad ``[B, ..., T, D]`` (time is dim -2) on the left to ``width`` time steps."""
    missing = width - tensor.shape[-2]
    if missing <= 0:
        return tensor
    pad = tensor.new_zeros(*tensor.shape[:-2], missing, tensor.shape[-1])
    return torch.cat([pad, tensor], dim=-2)


def left_pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pad an attention mask ``[B, T]`` on the left to ``[B, width]``."""
    missing = width - mask.shape[-1]
    if missing <= 0:
        return mask
    return torch.cat([mask.new_zeros(mask.shape[0], missing), mask], dim=-1)


def merge_rows(running: object, running_mask: torch.Tensor, new: object, new_mask: torch.Tensor):
    """Append the rows of cache ``new`` (mask ``[k, T2]``) after those of ``running`` (mask ``[B, T1]``).

    ``running`` is updated in place (its layers get ``[B + k, H, max(T1, T2), D]`` tensors) and returned with
    the merged mask ``[B + k, max(T1, T2)]``.
    """
    width = max(running_mask.shape[-1], new_mask.shape[-1])
    for old_layer, new_layer in zip(_layers(running), _layers(new), strict=True):
        old_layer.keys = torch.cat([left_pad_time(old_layer.keys, width), left_pad_time(new_layer.keys, width)])
        old_layer.values = torch.cat([left_pad_time(old_layer.values, width), left_pad_time(new_layer.values, width)])
    mask = torch.cat([left_pad_mask(running_mask, width), left_pad_mask(new_mask, width)])
    return running, mask


def trim_leading(cache: object, mask: torch.Tensor, columns: int) -> torch.Tensor:
    """Drop the first ``columns`` time steps (padding in every row) from ``cache`` in place; return the mask."""
    if columns <= 0:
        return mask
    for layer in _layers(cache):
        layer.keys = layer.keys[..., columns:, :]
        layer.values = layer.values[..., columns:, :]
    return mask[:, columns:]
