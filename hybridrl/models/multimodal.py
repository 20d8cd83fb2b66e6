"""A batch's images for the model: per-row vision inputs, packed so they travel with their rows.

The dataset keeps each row's processor outputs in the non-tensor column ``multi_modal_inputs``
(``data.return_multi_modal_inputs``): ``{"pixel_values": [N_i, D], "image_grid_thw": [I_i, 3]}`` for a row with
``I_i`` images of ``N_i`` patches in all, ``{}`` for a text row. The model wants one batch's images concatenated in
row order, so a micro-batch must hold exactly its own rows' images in its own row order, whatever splitting,
balancing or reordering came before. The training side therefore packs them into the row-indexed tensors below,
which every split or reorder of the ``TensorDict`` carries along with the rows; the rollout concatenates the
non-tensor column directly (:func:`concat_vision_inputs`).

    mm_pixel_values     [B, N_max, D]  row i's patches in its first N_i rows, zeros after
    mm_num_patches      [B]            N_i
    mm_image_grid_thw   [B, I_max, 3]  row i's image grids (t, h, w) in its first I_i rows
    mm_num_images       [B]            I_i

Position ids of the Qwen-VL families (mrope) are ``[B, 3, S]`` in the batch (verl's layout) and ``[3, B, S]`` for
the model (:func:`model_position_ids`). Supported: images of the Qwen2-VL / Qwen2.5-VL / Qwen3-VL families in the
padded forward; other vision inputs (videos, Idefics3's ``pixel_attention_mask``) and the packed forward
(``use_remove_padding``, Ulysses) with images are refused by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from hybridrl.models.image_fingerprint import check_images

MULTI_MODAL_INPUTS_KEY = "multi_modal_inputs"
SUPPORTED_VISION_KEYS = ("pixel_values", "image_grid_thw")
CHECKED_IMAGES_METRIC = "actor/image_check_samples"  # samples whose images matched the rollout's (per update)
PACKED_KEYS = ("mm_pixel_values", "mm_num_patches", "mm_image_grid_thw", "mm_num_images")

TokenFn = Callable[[torch.Tensor, torch.Tensor], list[torch.Tensor]]


def _rows_with_images(rows: Sequence[Mapping[str, Any] | None]) -> list[Mapping[str, Any]]:
    rows = [row or {} for row in rows]
    for index, row in enumerate(rows):
        unsupported = sorted(set(row) - set(SUPPORTED_VISION_KEYS))
        if unsupported:
            raise NotImplementedError(
                f"multi_modal_inputs of row {index} holds {unsupported}: only images of the Qwen2-VL / Qwen2.5-VL / "
                f"Qwen3-VL families ({list(SUPPORTED_VISION_KEYS)}) reach the model so far (no videos, no Idefics3)"
            )
    return rows


def has_images(rows: Sequence[Mapping[str, Any] | None] | None) -> bool:
    """Whether any row of a ``multi_modal_inputs`` column holds an image."""
    return rows is not None and any(row and row.get("pixel_values") is not None for row in rows)


def concat_vision_inputs(rows: Sequence[Mapping[str, Any] | None]) -> dict[str, torch.Tensor]:
    """The model's vision kwargs for these rows, in row order: ``pixel_values [ΣN_i, D]``,
    ``image_grid_thw [ΣI_i, 3]``; ``{}`` when no row has an image."""
    rows = [row for row in _rows_with_images(rows) if row.get("pixel_values") is not None]
    if not rows:
        return {}
    return {key: torch.cat([torch.as_tensor(row[key]) for row in rows]) for key in SUPPORTED_VISION_KEYS}


def pack_vision_inputs(rows: Sequence[Mapping[str, Any] | None]) -> dict[str, torch.Tensor]:
    """A ``multi_modal_inputs`` column → the row-indexed tensors of the module docstring (``{}`` without images)."""
    rows = _rows_with_images(rows)
    if not has_images(rows):
        return {}
    pixels = [torch.as_tensor(row["pixel_values"]) if row else None for row in rows]
    grids = [torch.as_tensor(row["image_grid_thw"]).long() if row else None for row in rows]
    dim = next(p for p in pixels if p is not None).shape[-1]
    dtype = next(p for p in pixels if p is not None).dtype
    num_patches = torch.tensor([0 if p is None else p.shape[0] for p in pixels])
    num_images = torch.tensor([0 if g is None else g.shape[0] for g in grids])
    packed_pixels = torch.zeros(len(rows), max(int(num_patches.max()), 1), dim, dtype=dtype)
    packed_grids = torch.zeros(len(rows), max(int(num_images.max()), 1), 3, dtype=torch.long)
    for i, (p, g) in enumerate(zip(pixels, grids)):
        if p is not None:
            packed_pixels[i, : p.shape[0]] = p
            packed_grids[i, : g.shape[0]] = g
    return dict(zip(PACKED_KEYS, (packed_pixels, num_patches, packed_grids, num_images)))


def unpack_vision_inputs(micro_batch: Any) -> dict[str, torch.Tensor]:
    """Packed rows of a micro-batch → the model's ``pixel_values`` / ``image_grid_thw`` in row order (``{}``
    when none of its rows has an image)."""
    if PACKED_KEYS[0] not in micro_batch.keys():
        return {}
    num_patches, num_images = micro_batch["mm_num_patches"].tolist(), micro_batch["mm_num_images"].tolist()
    if sum(num_images) == 0:
        return {}
    pixels = micro_batch["mm_pixel_values"]
    grids = micro_batch["mm_image_grid_thw"]
    return {
        "pixel_values": torch.cat([pixels[i, :n] for i, n in enumerate(num_patches) if n]),
        "image_grid_thw": torch.cat([grids[i, :k] for i, k in enumerate(num_images) if k]),
    }


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
