"""Tiny random vision-language models with a processor around the locally trained tokenizer (no hub access).

    family       model class (transformers)                 processor                      rope
    qwen2_vl     Qwen2VLForConditionalGeneration            QwenVLImageProcessor (ours)    3-row mrope
    qwen2_5_vl   Qwen2_5_VLForConditionalGeneration         QwenVLImageProcessor (ours)    3-row mrope
    qwen3_vl     Qwen3VLForConditionalGeneration            QwenVLImageProcessor (ours)    3-row mrope (interleaved)
    idefics3     Idefics3ForConditionalGeneration           Idefics3Processor              1-D (SmolVLM-style)

A 56×56 image becomes 4 vision tokens in every family (Qwen2/2.5-VL: 14-pixel patches, 2×2 merge; Qwen3-VL: resized
to 64×64, 16-pixel patches, 2×2 merge; Idefics3: 14-pixel patches, pixel shuffle 2). The language model keeps
``head_dim = 32`` (vLLM's CPU attention needs ≥ 32). The Qwen folders hold transformers' own image processor config,
tokenizer and chat template: with torchvision installed ``AutoProcessor`` loads the real processor; without it
:func:`hybridrl.utils.tokenizer.hf_processor` returns :class:`QwenVLImageProcessor` (images only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hybridrl.models.tiny import EOS_TOKEN, PAD_TOKEN, build_tokenizer
from hybridrl.utils.tokenizer.qwen_vl_processor import (
    IMAGE_TOKEN,
    QWEN_VL_SPECIAL_TOKENS,
    VIDEO_TOKEN,
    VISION_END_TOKEN,
    VISION_START_TOKEN,
    QwenVLImageProcessor,
)

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "idefics3")
IMAGE_SIZE = 56
IDEFICS3_SPECIAL_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]

_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 1024,
}
_HEAD_DIM = _TEXT["hidden_size"] // _TEXT["num_attention_heads"]  # 32
# mrope splits head_dim/2 = 16 rotary frequencies over (t, h, w)
_MROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]}

# Qwen-style template over plain or typed content; an image part becomes the vision tokens the processor expands.
QWEN_VL_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '" + VISION_START_TOKEN + IMAGE_TOKEN + VISION_END_TOKEN + "' }}"
    "{% elif part['type'] == 'video' %}{{ '" + VISION_START_TOKEN + VIDEO_TOKEN + VISION_END_TOKEN + "' }}"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# The same turns for Idefics3: an image part is ``<image>``, which Idefics3Processor expands.
IDEFICS3_CHAT_TEMPLATE = QWEN_VL_CHAT_TEMPLATE.replace(VISION_START_TOKEN + IMAGE_TOKEN + VISION_END_TOKEN, "<image>")


def _vlm_tokenizer(special_tokens: list[str], chat_template: str) -> Any:
    tokenizer = build_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": special_tokens}, replace_extra_special_tokens=False)
    tokenizer.chat_template = chat_template
    return tokenizer


def _qwen_config(family: str, tokenizer: Any) -> Any:
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig

    ids = {
        f"{name}_token_id": tokenizer.convert_tokens_to_ids(token)
        for name, token in (
            ("image", IMAGE_TOKEN),
            ("video", VIDEO_TOKEN),
            ("vision_start", VISION_START_TOKEN),
            ("vision_end", VISION_END_TOKEN),
        )
    }
    text = {
        **_TEXT,
        "vocab_size": len(tokenizer),
        "eos_token_id": tokenizer.convert_tokens_to_ids(EOS_TOKEN),
        "pad_token_id": tokenizer.convert_tokens_to_ids(PAD_TOKEN),
        "bos_token_id": None,
        "rope_parameters": dict(_MROPE),
    }
    vision = {"depth": 1, "num_heads": 2, "spatial_merge_size": 2, "temporal_patch_size": 2}
    if family == "qwen2_vl":
        vision.update(embed_dim=32, mlp_ratio=2, hidden_size=_TEXT["hidden_size"])
        return Qwen2VLConfig(text_config=text, vision_config=vision, **ids)
    # Qwen2.5-VL and Qwen3-VL: the vision tower has its own width, projected to the language model's width
    vision.update(hidden_size=32, intermediate_size=64, out_hidden_size=_TEXT["hidden_size"])
    if family == "qwen2_5_vl":
        vision.update(window_size=IMAGE_SIZE, fullatt_block_indexes=[0])
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)
    vision.update(patch_size=16, num_position_embeddings=16, deepstack_visual_indexes=[0])
    text["head_dim"] = _HEAD_DIM
    text["rope_parameters"]["mrope_interleaved"] = True
    return Qwen3VLConfig(text_config=text, vision_config=vision, **ids)


def _qwen_parts(family: str) -> tuple[Any, Any]:
    """(model config, processor) of a tiny Qwen-VL-family model: 56×56 → 2×2 merged patches = 4 vision tokens."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = _vlm_tokenizer(QWEN_VL_SPECIAL_TOKENS, QWEN_VL_CHAT_TEMPLATE)
    patch_size = 16 if family == "qwen3_vl" else 14
    side = 2 * 2 * patch_size  # the image is resized to a multiple of patch_size * merge_size: 2×2 merged patches
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=patch_size,
        merge_size=2,
        temporal_patch_size=2,
        size={"shortest_edge": side * side, "longest_edge": side * side},
    )
    return _qwen_config(family, tokenizer), QwenVLImageProcessor(image_processor, tokenizer)


def _idefics3_parts() -> tuple[Any, Any]:
    """(model config, processor) of a tiny Idefics3 (SmolVLM-style): 56×56, 14-pixel patches, shuffle 2 → 4 tokens."""
    from transformers import Idefics3Config, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tokenizer = _vlm_tokenizer(IDEFICS3_SPECIAL_TOKENS, IDEFICS3_CHAT_TEMPLATE)
    edge = {"longest_edge": IMAGE_SIZE}
    image_processor = Idefics3ImageProcessorPil(do_image_splitting=False, size=edge, max_image_size=edge)
    processor = Idefics3Processor(image_processor, tokenizer, image_seq_len=4, chat_template=IDEFICS3_CHAT_TEMPLATE)
    text = {
        **_TEXT,
        "vocab_size": len(tokenizer),
        "eos_token_id": tokenizer.convert_tokens_to_ids(EOS_TOKEN),
        "pad_token_id": tokenizer.convert_tokens_to_ids(PAD_TOKEN),
        "bos_token_id": None,
        "model_type": "llama",
    }
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": IMAGE_SIZE,
        "patch_size": 14,
    }
    config = Idefics3Config(
        text_config=text,
        vision_config=vision,
        scale_factor=2,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
    )
    return config, processor


def build_tiny_vlm(out_dir: str | Path, family: str = "qwen2_vl", seed: int = 0) -> Path:
    """Write a random tiny VLM of ``family`` (one of :data:`FAMILIES`) with its processor files to ``out_dir``.

    Re-running with the same family and seed into a complete folder is a no-op (cached).
    """
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    if family not in FAMILIES:
        raise ValueError(f"family={family!r} must be one of {FAMILIES}")
    out = Path(out_dir).expanduser()
    marker, spec = out / "hybridrl_tiny_vlm_spec.json", {"family": family, "seed": seed}
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return out
    config, processor = _idefics3_parts() if family == "idefics3" else _qwen_parts(family)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    eos_id, pad_id = config.get_text_config().eos_token_id, config.get_text_config().pad_token_id
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    marker.write_text(json.dumps(spec))
    return out
