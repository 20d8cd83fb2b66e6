"""A batch's images for the model: per-row vision inputs, packed so they travel with their rows.

The dataset keeps each row's processor outputs in the non-tensor column ``multi_modal_inputs``
(``data.return_multi_modal_inputs``), ``{}`` for a text row:

    Qwen2-VL / 2.5-VL / 3-VL   pixel_values [N_i, D]  (N_i patches)     image_grid_thw [I_i, 3]  (I_i images)
    Idefics3 (SmolVLM)         pixel_values [1, N_i, C, H, W]            pixel_attention_mask [1, N_i, H, W]
                               (N_i crops: each image's global view, + its tiles with image splitting)

The model wants one batch's images concatenated in row order, so a micro-batch must hold exactly its own rows'
images in its own row order, whatever splitting, balancing or reordering came before. The training side therefore
packs them into the row-indexed tensors below, which every split or reorder of the ``TensorDict`` carries along
with the rows; the rollout concatenates the non-tensor column directly (:func:`concat_vision_inputs`).

    mm_pixel_values          [B, N_max, ...]     row i's patches (Qwen) or crops (Idefics3) first, zeros after
    mm_num_patches           [B]                 N_i
    mm_image_grid_thw        [B, I_max, 3]       Qwen: row i's image grids (t, h, w) in its first I_i rows
    mm_num_images            [B]                 I_i
    mm_pixel_attention_mask  [B, N_max, H, W]    Idefics3: row i's crop masks in its first N_i rows
    mm_num_crops             [B]                 N_i

Position ids of the Qwen-VL families (mrope) are ``[B, 3, S]`` in the batch (verl's layout) and ``[3, B, S]`` for
the model (:func:`model_position_ids`); Idefics3 uses plain ``[B, S]`` ids. Supported: images of these families in
the padded forward; other vision inputs (videos) and the packed forward (``use_remove_padding``, Ulysses) with
images are refused by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from hybridrl.models.image_fingerprint import check_images

MULTI_MODAL_INPUTS_KEY = "multi_modal_inputs"
# a row's vision input → (its packed tensor, its per-row count of entries along the first dim)
_PACKING = {
    "pixel_values": ("mm_pixel_values", "mm_num_patches"),
    "image_grid_thw": ("mm_image_grid_thw", "mm_num_images"),
    "pixel_attention_mask": ("mm_pixel_attention_mask", "mm_num_crops"),
}
# Idefics3's inputs carry an image-batch dim before the crops: pixel_values [1, N, C, H, W], mask [1, N, H, W]
_BATCHED_NDIM = {"pixel_values": 5, "pixel_attention_mask": 4}
SUPPORTED_VISION_KEYS = tuple(_PACKING)
CHECKED_IMAGES_METRIC = "actor/image_check_samples"  # samples whose images matched the rollout's (per update)
PACKED_KEYS = tuple(name for pair in _PACKING.values() for name in pair)

TokenFn = Callable[[torch.Tensor, torch.Tensor], list[torch.Tensor]]


def _rows_with_images(rows: Sequence[Mapping[str, Any] | None]) -> list[Mapping[str, Any]]:
    rows = [row or {} for row in rows]
    for index, row in enumerate(rows):
        unsupported = sorted(set(row) - set(SUPPORTED_VISION_KEYS))
        if unsupported:
            raise NotImplementedError(
                f"multi_modal_inputs of row {index} holds {unsupported}: only images of the Qwen2-VL / Qwen2.5-VL / "
                f"Qwen3-VL and Idefics3 families ({list(SUPPORTED_VISION_KEYS)}) reach the model so far (no videos)"
            )
    return rows


def has_images(rows: Sequence[Mapping[str, Any] | None] | None) -> bool:
    """Whether any row of a ``multi_modal_inputs`` column holds an image."""
    return rows is not None and any(row and row.get("pixel_values") is not None for row in rows)


def _row_entries(key: str, value: Any) -> torch.Tensor:
    """A row's input with its entries along the first dim (Idefics3's image-batch dim folded into the crops)."""
    value = torch.as_tensor(value)
    return value.flatten(0, 1) if value.dim() == _BATCHED_NDIM.get(key) else value


def _model_layout(key: str, entries: torch.Tensor) -> torch.Tensor:
    """Concatenated entries → the model's layout (Idefics3: one image batch of all crops, ``[1, ΣN, ...]``)."""
    return entries[None] if entries.dim() + 1 == _BATCHED_NDIM.get(key) else entries


def _image_rows_keys(rows: list[Mapping[str, Any]]) -> list[str]:
    """The vision keys of the rows with images; one family's keys in every such row."""
    image_rows = [row for row in rows if row.get("pixel_values") is not None]
    keys = [key for key in SUPPORTED_VISION_KEYS if key in image_rows[0]]
    for index, row in enumerate(rows):
        if row.get("pixel_values") is not None and sorted(row) != sorted(keys):
            raise ValueError(
                f"multi_modal_inputs of row {index} holds {sorted(row)} but another row holds {sorted(keys)}: every "
                "row's images must come from the same processor"
            )
    return keys


def concat_vision_inputs(rows: Sequence[Mapping[str, Any] | None]) -> dict[str, torch.Tensor]:
    """The model's vision kwargs for these rows, in row order (``{}`` when no row has an image): Qwen-VL
    ``pixel_values [ΣN_i, D]``, ``image_grid_thw [ΣI_i, 3]``; Idefics3 ``pixel_values [1, ΣN_i, C, H, W]``,
    ``pixel_attention_mask [1, ΣN_i, H, W]`` (N_i: row i's crops)."""
    rows = _rows_with_images(rows)
    if not has_images(rows):
        return {}
    keys = _image_rows_keys(rows)
    image_rows = [row for row in rows if row.get("pixel_values") is not None]
    return {key: _model_layout(key, torch.cat([_row_entries(key, row[key]) for row in image_rows])) for key in keys}


def pack_vision_inputs(rows: Sequence[Mapping[str, Any] | None]) -> dict[str, torch.Tensor]:
    """A ``multi_modal_inputs`` column → the row-indexed tensors of the module docstring (``{}`` without images)."""
    rows = _rows_with_images(rows)
    if not has_images(rows):
        return {}
    packed = {}
    for key in _image_rows_keys(rows):
        entries = [None if row.get("pixel_values") is None else _row_entries(key, row[key]) for row in rows]
        first = next(e for e in entries if e is not None)
        for index, e in enumerate(entries):
            if e is not None and e.shape[1:] != first.shape[1:]:
                raise ValueError(
                    f"multi_modal_inputs[{key!r}] of row {index} has entries of shape {list(e.shape[1:])}, another "
                    f"row's {list(first.shape[1:])}: process every row's images with the same processor settings"
                )
        counts = torch.tensor([0 if e is None else e.shape[0] for e in entries])
        values = torch.zeros(len(rows), max(int(counts.max()), 1), *first.shape[1:], dtype=first.dtype)
        for i, e in enumerate(entries):
            if e is not None:
                values[i, : e.shape[0]] = e
        packed_name, count_name = _PACKING[key]
        packed[packed_name], packed[count_name] = values, counts
    return packed


def unpack_vision_inputs(micro_batch: Any) -> dict[str, torch.Tensor]:
    """Packed rows of a micro-batch → the model's vision kwargs in row order, as :func:`concat_vision_inputs`
    (``{}`` when none of its rows has an image)."""
    if PACKED_KEYS[0] not in micro_batch.keys() or int(micro_batch["mm_num_patches"].sum()) == 0:
        return {}
    inputs = {}
    for key, (packed_name, count_name) in _PACKING.items():
        if packed_name in micro_batch.keys():
            values, counts = micro_batch[packed_name], micro_batch[count_name].tolist()
            inputs[key] = _model_layout(key, torch.cat([values[i, :n] for i, n in enumerate(counts) if n]))
    return inputs


def uses_vision_forward(micro_batch: Any) -> bool:
    """A micro-batch that needs :func:`forward_response_with_images`: packed images or mrope position ids."""
    return PACKED_KEYS[0] in micro_batch.keys() or micro_batch["position_ids"].dim() == 3


def model_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """Batch layout → the model's: mrope ``[B, 3, S]`` → ``[3, B, S]``; 1-D positions ``[B, S]`` unchanged."""
    return position_ids.transpose(0, 1) if position_ids.dim() == 3 else position_ids


def forward_response_with_images(
    module: nn.Module, micro_batch: Any, token_fn: TokenFn, use_remove_padding: bool
) -> list[torch.Tensor]:
    """The padded forward of a vision-language micro-batch (its rows' images, mrope positions), mapped to the
    response positions: each tensor of ``token_fn`` as ``[B, R]`` (see ``workers/actor/forward.forward_response``)."""
    if use_remove_padding:
        raise NotImplementedError(
            "a batch with images (or mrope position ids) needs the padded forward: set "
            "actor_rollout_ref.model.use_remove_padding=False (and critic.model.use_remove_padding=False); the "
            "packed forward and Ulysses sequence parallelism do not take images yet"
        )
    responses = micro_batch["responses"]
    response_length = responses.shape[-1]
    output = module(
        input_ids=micro_batch["input_ids"],
        attention_mask=micro_batch["attention_mask"],
        position_ids=model_position_ids(micro_batch["position_ids"]),
        use_cache=False,
        **unpack_vision_inputs(micro_batch),
    )
    logits = output.logits[:, -response_length - 1 : -1]  # [B, R, V]
    return token_fn(logits, responses)


def add_packed_vision_inputs(batch: Any, non_tensor_batch: Mapping[str, Any], module: nn.Module | None = None) -> int:
    """Add the packed images of ``non_tensor_batch``'s ``multi_modal_inputs`` column to ``batch`` (a ``TensorDict``
    of the same rows, with ``input_ids`` and ``responses``) in place, after checking each sample's images against its
    prompt and the rollout's fingerprint (``image_fingerprint.check_images``; ``module``: the policy, for its config).

    Returns:
        The number of samples whose images were checked (0 for a text batch).
    """
    rows = list(non_tensor_batch.get(MULTI_MODAL_INPUTS_KEY, ()))
    checked = 0
    if rows and module is not None:
        prompt_length = batch["input_ids"].shape[1] - batch["responses"].shape[1]
        checked = check_images(batch["input_ids"][:, :prompt_length], non_tensor_batch, _hf_config(module))
    for key, value in pack_vision_inputs(rows).items():
        batch[key] = value.to(batch.device) if batch.device is not None else value
    return checked


def _hf_config(module: nn.Module) -> Any:
    """The HF config of a plain, FSDP- or PEFT-wrapped model."""
    for candidate in (module, getattr(module, "module", None), getattr(module, "_fsdp_wrapped_module", None)):
        config = getattr(candidate, "config", None)
        if config is not None:
            return config
    return None


def vision_language_auto_class(config: Any) -> Any:
    """The transformers auto class that loads a model of ``config``: ``AutoModelForImageTextToText`` for a
    vision-language model (its config has a ``vision_config``), else ``AutoModelForCausalLM``."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if getattr(config, "vision_config", None) is not None else AutoModelForCausalLM
