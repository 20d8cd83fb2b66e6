"""Multimodal rows of verl's schema: placeholders → typed content, images decoded, mrope position ids.

A row's chat messages hold ``<image>`` / ``<video>`` placeholders in their text; the row's ``data.image_key`` column
(default ``images``) holds one image per ``<image>``, in order: ``{"bytes": b"..."}`` (what ``datasets``' Image
feature and verl's ``examples/data_preprocess/geo3k.py`` write), ``{"path": "..."}``, a path string, or a PIL image.

    "Look: <image> what colour?"  →  [{"type": "text", "text": "Look: "}, {"type": "image", "image": <PIL>},
                                      {"type": "text", "text": " what colour?"}]

The processor's chat template renders an image part as its vision tokens; the processor then expands them to one
token per merged patch. Qwen2-VL-family models place those tokens with 3-row rope position ids (temporal, height,
width: :func:`mrope_position_ids`, equal to the model's own ``get_rope_index`` for images).
"""

from __future__ import annotations

import io
import os
import re
from typing import Any

import torch

IMAGE_PLACEHOLDER = "<image>"
VIDEO_PLACEHOLDER = "<video>"
_PLACEHOLDER_SPLIT = re.compile(f"({IMAGE_PLACEHOLDER}|{VIDEO_PLACEHOLDER})")


def count_placeholders(messages: list[dict]) -> tuple[int, int]:
    """(number of ``<image>``, number of ``<video>``) in the messages' string contents."""
    texts = [m["content"] for m in messages if isinstance(m.get("content"), str)]
    return sum(t.count(IMAGE_PLACEHOLDER) for t in texts), sum(t.count(VIDEO_PLACEHOLDER) for t in texts)


def check_media_counts(messages: list[dict], num_images: int, num_videos: int, where: str) -> None:
    """Require one image per ``<image>`` and one video per ``<video>``.

    Raises:
        ValueError: naming ``where`` (file and row), both counts and the fix.
    """
    image_slots, video_slots = count_placeholders(messages)
    for kind, slots, given in (("image", image_slots, num_images), ("video", video_slots, num_videos)):
        if slots != given:
            raise ValueError(
                f"{where}: the prompt has {slots} <{kind}> placeholder(s) but the row gives {given} {kind}(s); "
                f"each <{kind}> in the prompt text takes the next {kind} of the row's data.{kind}_key column, "
                "so the counts must be equal (fix the row or drop it)"
            )


def typed_messages(messages: list[dict], images: list[Any], videos: list[Any]) -> list[dict]:
    """Copies of ``messages`` whose placeholder-holding string contents become typed content lists.

    ``images`` / ``videos`` are consumed in order of appearance; messages without a placeholder keep their string.
    Counts must already agree (:func:`check_media_counts`).
    """
    media = {IMAGE_PLACEHOLDER: iter(images), VIDEO_PLACEHOLDER: iter(videos)}
    typed = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str) or not _PLACEHOLDER_SPLIT.search(content):
            typed.append(dict(message))
            continue
        parts = []
        for segment in filter(None, _PLACEHOLDER_SPLIT.split(content)):
            if segment in media:
                kind = segment[1:-1]
                parts.append({"type": kind, kind: next(media[segment])})
            else:
                parts.append({"type": "text", "text": segment})
        typed.append({**message, "content": parts})
    return typed


def load_image(image: Any, where: str) -> Any:
    """A row's image as an RGB ``PIL.Image``.

    Args:
        image: ``{"bytes": ...}`` (``path`` used when ``bytes`` is empty), ``{"path": ...}``, a path, or a PIL image.
        where: the row, for the error message.

    Raises:
        ValueError: the image is missing or cannot be decoded (names ``where`` and the path when there is one).
    """
    from PIL import Image, UnidentifiedImageError

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    source: Any = image
    if isinstance(image, dict):
        source = io.BytesIO(image["bytes"]) if image.get("bytes") else image.get("path")
    elif isinstance(image, os.PathLike):
        source = os.fspath(image)
    if not source:
        raise ValueError(f"{where}: an image entry has neither bytes nor a path ({_describe(image)})")
    try:
        with Image.open(source) as opened:
            return opened.convert("RGB")
    except (OSError, UnidentifiedImageError) as exc:  # FileNotFoundError is an OSError
        raise ValueError(f"{where}: cannot read image {_describe(image)}: {type(exc).__name__}: {exc}") from exc


def _describe(image: Any) -> str:
    if isinstance(image, dict):
        size = len(image.get("bytes") or b"")
        return f"{{'bytes': <{size} bytes>, 'path': {image.get('path')!r}}}"
    return repr(image)


def mrope_merge_size(processor: Any) -> int | None:
    """The spatial merge size of a Qwen2-VL-family processor (whose model uses 3-row mrope), else None.

    Qwen2-VL, Qwen2.5-VL and Qwen3-VL all process images with a ``Qwen2VLImageProcessor`` (any backend).
    """
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None or not type(image_processor).__name__.startswith("Qwen2VLImageProcessor"):
        return None
    return int(image_processor.merge_size)


def mrope_position_ids(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    image_token_id: int,
    image_grid_thw: torch.Tensor | None,
    spatial_merge_size: int,
) -> torch.Tensor:
    """3-row rope position ids of one sequence with images (Qwen2-VL family), padding at 0.

    Notation: an image of grid (t, h, w) patches fills n = t·h·w / m² consecutive image tokens (m = merge size);
    its tokens sit on a (t, h/m, w/m) grid starting at the running position s:
        temporal = s + i_t,  height = s + i_h,  width = s + i_w
    and the text after it resumes at s + max(h, w) / m. Text tokens advance all three rows together by 1.

    Args:
        input_ids: ``[L]`` token ids (left padding allowed).
        attention_mask: ``[L]`` 1 on real tokens, 0 on padding.
        image_token_id: the id of the expanded image token.
        image_grid_thw: ``[N, 3]`` the images' patch grids, in order of appearance (None without images).
        spatial_merge_size: m, patches merged per side into one vision token.

    Returns:
        ``[3, L]`` LongTensor.
    """
    valid = attention_mask.bool()
    tokens = input_ids[valid].tolist()
    grids = iter(image_grid_thw.tolist() if image_grid_thw is not None else [])
    rows: list[torch.Tensor] = []
    position, index = 0, 0
    while index < len(tokens):
        if tokens[index] != image_token_id:  # a text run: all three rows advance together
            end = index + 1
            while end < len(tokens) and tokens[end] != image_token_id:
                end += 1
            rows.append(torch.arange(end - index).expand(3, -1) + position)
            position, index = position + end - index, end
            continue
        t, h, w = next(grids)
        h, w = h // spatial_merge_size, w // spatial_merge_size
        grid = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij"))
        rows.append(grid.reshape(3, -1) + position)
        position, index = position + max(h, w), index + t * h * w
    position_ids = torch.zeros(3, input_ids.shape[-1], dtype=torch.long)
    if rows:
        position_ids[:, valid] = torch.cat(rows, dim=1)
    return position_ids
