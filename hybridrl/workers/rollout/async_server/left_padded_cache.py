"""Row-level surgery on a left-padded Hugging Face ``DynamicCache`` for continuous batching.

Every layer holds ``keys/values [B, H, T, D]``; row ``b`` is left-padded: its real tokens are the last ones
and ``attention_mask[b, :T]`` is 0 on the padding. Merging two caches pads the shorter one on the left of the
time axis with zeros (masked out by a 0 in the attention mask) and stacks the rows. ``row_kv`` copies one row's
attended steps out (for the prefix cache) and ``stack_prefixes`` builds a left-padded cache from such copies.
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


def row_kv(cache: object, mask: torch.Tensor, row: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Copies of row ``row``'s attended time steps (``mask[row] == 1``): ``[(keys, values) [H, L, D], ...]``."""
    columns = mask[row].nonzero().squeeze(-1)  # [L]
    return [
        (layer.keys[row].index_select(-2, columns), layer.values[row].index_select(-2, columns))
        for layer in _layers(cache)
    ]


def stack_prefixes(prefixes: list[list[tuple[torch.Tensor, torch.Tensor]]], lengths: list[int]):
    """A left-padded ``DynamicCache`` of the first ``lengths[i]`` steps of each row's layers ``[(k, v) [H, L_i, D]]``.

    Returns ``(cache, mask [k, max(lengths)])`` (cache layers ``[k, H, max(lengths), D]``; mask 0 on padding).
    """
    from transformers import DynamicCache

    width = max(lengths)
    layers = []
    for layer in zip(*prefixes, strict=True):  # one model layer, every row
        keys = [left_pad_time(k[:, :n], width) for (k, _), n in zip(layer, lengths)]
        values = [left_pad_time(v[:, :n], width) for (_, v), n in zip(layer, lengths)]
        layers.append((torch.stack(keys), torch.stack(values)))
    device = layers[0][0].device
    mask = torch.zeros(len(lengths), width, dtype=torch.long, device=device)
    for i, n in enumerate(lengths):
        mask[i, width - n :] = 1
    return DynamicCache(ddp_cache_data=layers), mask
