"""An image-only Qwen-VL processor: what ``Qwen2VLProcessor`` does for images, without a video processor.

transformers' ``Qwen2VLProcessor`` / ``Qwen2_5_VLProcessor`` / ``Qwen3VLProcessor`` cannot be built where
torchvision does not load (their video processor needs it). Their image processor has a PIL backend, so this class
wraps that image processor and the tokenizer and does the processor's image work:

    text "... <|vision_start|><|image_pad|><|vision_end|> ..."  +  images
      → pixel_values    [sum_i t_i*h_i*w_i, C*T*P*P]   the image processor's patches
      → image_grid_thw  [num_images, 3]                 patches per image along (t, h, w)
      → input_ids       [B, L]   each ``<|image_pad|>`` repeated t*h*w / merge_size**2 times (one per vision token)
      → mm_token_type_ids [B, L] 1 at image tokens, 0 elsewhere (the model's rope index reads it)

:func:`hybridrl.utils.tokenizer.hf_processor` returns it when a folder's ``AutoProcessor`` cannot be built but its
image processor is a Qwen-VL one. Videos are refused (they need transformers' video processor and torchvision).
"""

from __future__ import annotations

import os
from typing import Any

IMAGE_TOKEN = "<|image_pad|>"
VIDEO_TOKEN = "<|video_pad|>"
VISION_START_TOKEN = "<|vision_start|>"
VISION_END_TOKEN = "<|vision_end|>"
QWEN_VL_SPECIAL_TOKENS = [VISION_START_TOKEN, VISION_END_TOKEN, IMAGE_TOKEN, VIDEO_TOKEN]

_QWEN_VL_IMAGE_PROCESSORS = ("Qwen2VLImageProcessor", "Qwen2VLImageProcessorPil", "Qwen2VLImageProcessorFast")


class QwenVLImageProcessor:
    """Image-only stand-in for the Qwen2-VL-family processor (same call and outputs for images).

    Args:
        image_processor: a ``Qwen2VLImageProcessor`` (any backend); its ``merge_size`` sets tokens per image.
        tokenizer: the model's tokenizer, holding :data:`QWEN_VL_SPECIAL_TOKENS`.
        chat_template: renders typed content (``{"type": "image"}`` → the vision tokens); default: the tokenizer's.
    """

    image_token = IMAGE_TOKEN
    video_token = VIDEO_TOKEN

    def __init__(self, image_processor: Any, tokenizer: Any, chat_template: str | None = None):
        self.image_processor = image_processor
        self.tokenizer = tokenizer
        self.chat_template = chat_template or tokenizer.chat_template
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        self.video_token_id = tokenizer.convert_tokens_to_ids(VIDEO_TOKEN)
        if self.image_token_id is None or self.image_token_id == tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no {IMAGE_TOKEN!r} token: add {QWEN_VL_SPECIAL_TOKENS} to it")

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs: Any) -> QwenVLImageProcessor:
        from transformers import AutoImageProcessor, AutoTokenizer

        return cls(AutoImageProcessor.from_pretrained(path, **kwargs), AutoTokenizer.from_pretrained(path, **kwargs))

    @classmethod
    def fits(cls, image_processor: Any) -> bool:
        """Whether ``image_processor`` is a Qwen-VL image processor this class can wrap."""
        return type(image_processor).__name__ in _QWEN_VL_IMAGE_PROCESSORS

    def save_pretrained(self, path: str | os.PathLike) -> None:
        self.image_processor.save_pretrained(path)
        self.tokenizer.chat_template = self.chat_template
        self.tokenizer.save_pretrained(path)

    def apply_chat_template(self, messages: list[dict], **kwargs: Any) -> Any:
        """The chat template over typed content (``tokenize=False`` gives the text to pass to ``__call__``)."""
        if kwargs.get("chat_template") is None:
            kwargs["chat_template"] = self.chat_template
        return self.tokenizer.apply_chat_template(messages, **kwargs)

    def num_image_tokens(self, image_grid_thw: Any) -> list[int]:
        """Vision tokens per image: ``t*h*w / merge_size**2`` for each row of ``image_grid_thw`` [N, 3]."""
        merge = int(self.image_processor.merge_size)
        return [int(t * h * w) // merge**2 for t, h, w in image_grid_thw.tolist()]

    def __call__(
        self, text: str | list[str], images: Any = None, videos: Any = None, return_tensors: str = "pt", **kwargs: Any
    ) -> Any:
        """Tokenize ``text`` with each image token expanded, and process ``images`` (in order of appearance)."""
        from transformers import BatchFeature

        if videos:
            raise NotImplementedError(
                "videos need transformers' Qwen-VL video processor, which needs torchvision: install torchvision"
            )
        texts = [text] if isinstance(text, str) else list(text)
        image_inputs: dict[str, Any] = {}
        if images:
            image_inputs = dict(self.image_processor(images=images, return_tensors=return_tensors, **kwargs))
            texts = self._expand_image_tokens(texts, self.num_image_tokens(image_inputs["image_grid_thw"]))
        encoded = self.tokenizer(texts, return_tensors=return_tensors, padding=True, add_special_tokens=False)
        encoded["mm_token_type_ids"] = (encoded["input_ids"] == self.image_token_id).long()
        return BatchFeature(data={**encoded, **image_inputs}, tensor_type=return_tensors)

    def _expand_image_tokens(self, texts: list[str], tokens_per_image: list[int]) -> list[str]:
        remaining = iter(tokens_per_image)
        expanded = []
        for text in texts:
            pieces = text.split(IMAGE_TOKEN)
            out = pieces[0]
            for piece in pieces[1:]:
                count = next(remaining, None)
                if count is None:
                    raise ValueError(
                        f"the text holds more {IMAGE_TOKEN} tokens than the {len(tokens_per_image)} images given"
                    )
                out += IMAGE_TOKEN * count + piece
            expanded.append(out)
        if next(remaining, None) is not None:
            raise ValueError(f"{len(tokens_per_image)} images given but fewer {IMAGE_TOKEN} tokens in the text")
        return expanded

    def batch_decode(self, *args: Any, **kwargs: Any) -> list[str]:
        return self.tokenizer.batch_decode(*args, **kwargs)

    def decode(self, *args: Any, **kwargs: Any) -> str:
        return self.tokenizer.decode(*args, **kwargs)
