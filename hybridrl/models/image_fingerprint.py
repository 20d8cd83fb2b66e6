"""The rollout/training image check: does the training forward see the images the rollout saw?

Images can be dropped or misaligned between rollout and training while the loss still falls (rows reordered
without their images, a processor run again with other settings, an image lost between turns). The rollout
records, per sample, a fingerprint of what it showed the model; the training forward recomputes it from what it
is about to use and fails the step naming the sample and the part that differs. Each fingerprint is a short
string of four parts:

    images   the number of images of the sample (Idefics3: image crops, each image's global view and tiles)
    grids    their (t, h, w) patch grids (Idefics3: each crop's unpadded height × width in pixels); the
             processor's resize and splitting decide them
    pixels   a SHA-1 of the samples' pixel_values bytes (first 12 hex digits)
    tokens   the vision tokens of the prompt (``image_token_id``), which must equal Σ t·h·w / merge² (Qwen-VL)
             or crops × (image_size / patch_size)² / scale_factor² (Idefics3)

Independently of the rollout's record, a sample whose prompt holds another number of vision tokens than its
images make is refused (transformers would fail later with "image features and image tokens do not match", or a
row would silently meet another row's image features).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

FINGERPRINT_KEY = "multi_modal_fingerprint"
_PARTS = ("images", "grids", "pixels", "tokens")


def image_fingerprint(vision_inputs: Mapping[str, Any] | None, vision_tokens: int) -> str:
    """The fingerprint of one sample from its ``multi_modal_inputs`` and its prompt's vision-token count."""
    vision_inputs = vision_inputs or {}
    grid_list = _grids(vision_inputs)
    pixels = vision_inputs.get("pixel_values")
    digest = "-"
    if pixels is not None:
        digest = hashlib.sha1(torch.as_tensor(pixels).detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:12]
    values = (len(grid_list), ";".join(grid_list) or "-", digest, vision_tokens)
    return " ".join(f"{part}={value}" for part, value in zip(_PARTS, values))


def _grids(vision_inputs: Mapping[str, Any]) -> list[str]:
    """One entry per image: Qwen-VL ``t x h x w`` patches; Idefics3 per crop ``h x w`` unpadded pixels."""
    grids = vision_inputs.get("image_grid_thw")
    if grids is not None:
        return ["x".join(map(str, g)) for g in torch.as_tensor(grids).long().tolist()]
    mask = vision_inputs.get("pixel_attention_mask")
    if mask is None:
        return []
    mask = torch.as_tensor(mask).bool().flatten(0, -3)  # [N, H, W]
    return [f"{h}x{w}" for h, w in zip(mask.any(-1).sum(-1).tolist(), mask.any(-2).sum(-1).tolist())]


def expected_vision_tokens(vision_inputs: Mapping[str, Any] | None, model_config: Any) -> int:
    """The vision tokens a sample's images make in the model of ``model_config``.

    Qwen-VL: Σ t·h·w / m² over ``image_grid_thw`` (m = ``vision_config.spatial_merge_size``). Idefics3: each crop
    that is not all zeros (the model drops all-zero padding crops) gives (image_size / patch_size)² / scale_factor².
    """
    vision_inputs = vision_inputs or {}
    vision_config = getattr(model_config, "vision_config", None)
    grids = vision_inputs.get("image_grid_thw")
    if grids is not None:
        merge = int(getattr(vision_config, "spatial_merge_size", 1) or 1)
        return int(torch.as_tensor(grids).prod(-1).sum()) // merge**2
    pixels, scale = vision_inputs.get("pixel_values"), getattr(model_config, "scale_factor", None)
    if pixels is None or scale is None:
        return 0
    crops = torch.as_tensor(pixels).flatten(0, -4).flatten(1)  # [N, C·H·W]
    real_crops = int((crops != 0).any(-1).sum())
    return real_crops * (vision_config.image_size // vision_config.patch_size) ** 2 // int(scale) ** 2


def vision_tokens_of(prompt_ids: torch.Tensor, image_token_id: int) -> list[int]:
    """Vision tokens per prompt row, ``prompt_ids [B, P]`` → ``[B]`` counts."""
    return (prompt_ids == image_token_id).sum(-1).tolist()


def check_images(
    prompt_ids: torch.Tensor, non_tensor_batch: Mapping[str, Any], model_config: Any
) -> int:
    """Check each sample's images against its prompt and against the rollout's fingerprint (when recorded).

    Args:
        prompt_ids: the prompt part of ``input_ids``, ``[B, P]``.
        non_tensor_batch: the batch's columns: ``multi_modal_inputs``, optionally ``multi_modal_fingerprint``
            (the rollout's) and ``uid`` (named in the error).
        model_config: the policy's HF config (``image_token_id`` and :func:`expected_vision_tokens`' fields).

    Returns:
        The number of samples checked (those with images or a recorded fingerprint).

    Raises:
        ValueError: naming every sample whose images differ and how.
    """
    rows: Sequence[Any] = non_tensor_batch.get("multi_modal_inputs", ())
    image_token_id = getattr(model_config, "image_token_id", None)
    if not len(rows) or image_token_id is None:
        return 0
    recorded = non_tensor_batch.get(FINGERPRINT_KEY)
    uids = non_tensor_batch.get("uid")
    problems, checked = [], 0
    for i, (row, tokens) in enumerate(zip(rows, vision_tokens_of(prompt_ids, image_token_id))):
        rollout_fingerprint = None if recorded is None else recorded[i]
        if not row and not tokens and rollout_fingerprint is None:
            continue  # a text row of a text batch
        checked += 1
        name = f"sample {i}" + (f" (uid {uids[i]})" if uids is not None else "")
        expected = expected_vision_tokens(row, model_config)
        if expected != tokens:
            problems.append(f"{name}: its prompt holds {tokens} vision tokens but its images make {expected}")
        fingerprint = image_fingerprint(row, tokens)
        if rollout_fingerprint is not None and fingerprint != rollout_fingerprint:
            problems.append(f"{name}: {_difference(rollout_fingerprint, fingerprint)}")
    if problems:
        raise ValueError(
            "the images of the training forward differ from those the rollout saw (or from the prompt's vision "
            "tokens), so the update would train on misplaced images: " + "; ".join(problems) + ". Keep each row's "
            "multi_modal_inputs with its row, and process the images once (the dataset's processor settings)"
        )
    return checked


def _difference(rollout: str, training: str) -> str:
    """``part: rollout X, training Y`` for each part that differs."""
    before, after = dict(p.split("=", 1) for p in rollout.split()), dict(p.split("=", 1) for p in training.split())
    return ", ".join(
        f"{part}: rollout {before.get(part)}, training {after.get(part)}"
        for part in _PARTS if before.get(part) != after.get(part)
    )


def fingerprints(prompt_rows: Sequence[Sequence[int]], vision_rows: Sequence[Any], image_token_id: int) -> np.ndarray:
    """The rollout's fingerprint per sample (``prompt_rows``: unpadded prompt ids) as a non-tensor column."""
    return np.array(
        [image_fingerprint(row, sum(1 for t in ids if t == image_token_id)) for ids, row in zip(prompt_rows, vision_rows)],
        dtype=object,
    )
