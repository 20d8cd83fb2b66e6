"""Tokenizer loading with verl's conventions (``hf_tokenizer``: a pad token always exists), and verl 0.9's token-id
helpers (``normalize_token_ids``, ``get_processor_token_id``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)


def set_pad_token_id(tokenizer: Any) -> None:
    """If the tokenizer has no pad token, use eos as pad (verl's ``set_pad_token_id``)."""
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ValueError(
                "The tokenizer has neither a pad token nor an eos token; add one to tokenizer_config.json."
            )
        tokenizer.pad_token = tokenizer.eos_token
        logger.warning("tokenizer.pad_token_id is None; using eos_token %r as pad.", tokenizer.eos_token)


# gemma-2-2b-it's eos token is ambiguous; verl pins the end-of-turn token instead (id 107 in that vocabulary).
_GEMMA2_NAME = "gemma-2-2b-it"
_GEMMA2_EOS = {"eos_token": "<end_of_turn>", "eos_token_id": 107}


def hf_tokenizer(
    name_or_path: str,
    correct_pad_token: bool = True,
    correct_gemma2: bool = True,
    trust_remote_code: bool = False,
    custom_chat_template: str | None = None,
    **kwargs: Any,
) -> Any:
    """Load ``AutoTokenizer.from_pretrained(name_or_path)``; pad := eos if missing.

    ``correct_gemma2``: for a ``gemma-2-2b-it`` path, eos := ``<end_of_turn>`` (verl). ``custom_chat_template``
    (verl's ``actor_rollout_ref.model.custom_chat_template``) replaces the tokenizer's own chat template.
    """
    from transformers import AutoTokenizer

    if correct_gemma2 and isinstance(name_or_path, str) and _GEMMA2_NAME in name_or_path:
        logger.warning("Found %s tokenizer: eos_token := %r", _GEMMA2_NAME, _GEMMA2_EOS["eos_token"])
        kwargs.update(_GEMMA2_EOS)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code, **kwargs)
    if correct_pad_token:
        set_pad_token_id(tokenizer)
    if custom_chat_template is not None:
        tokenizer.chat_template = custom_chat_template
    return tokenizer


def hf_processor(name_or_path: str, trust_remote_code: bool = False, **kwargs: Any) -> Any | None:
    """A multimodal processor if the folder has one, else ``None`` (verl returns None for text models).

    A Qwen-VL folder whose ``AutoProcessor`` cannot be built (its video processor needs torchvision) gets
    :class:`~hybridrl.utils.tokenizer.qwen_vl_processor.QwenVLImageProcessor`, which does the image part.
    """
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(name_or_path, trust_remote_code=trust_remote_code, **kwargs)
    except Exception:  # text-only folders have no processor config; verl swallows this too
        return _image_only_processor(name_or_path, trust_remote_code=trust_remote_code, **kwargs)
    # AutoProcessor falls back to the tokenizer for text-only models: that is not a processor.
    if processor is None or "Processor" not in type(processor).__name__:
        return None
    return processor


def _image_only_processor(name_or_path: str, **kwargs: Any) -> Any | None:
    """:class:`QwenVLImageProcessor` for a Qwen-VL folder whose ``AutoProcessor`` cannot be built (its video
    processor needs torchvision); ``None`` for any other folder."""
    from transformers import AutoImageProcessor

    from hybridrl.utils.tokenizer.qwen_vl_processor import QwenVLImageProcessor

    try:
        image_processor = AutoImageProcessor.from_pretrained(name_or_path, **kwargs)
    except Exception:  # no image processor config: a text-only model
        return None
    if not QwenVLImageProcessor.fits(image_processor):
        return None
    return QwenVLImageProcessor.from_pretrained(name_or_path, **kwargs)


def normalize_token_ids(tokenized_output: Any) -> list[int]:
    """Token ids as a flat ``list[int]``, whatever form the tokenizer returned them in.

    ``apply_chat_template(tokenize=True)`` gives a list in transformers 4 and a ``BatchEncoding`` (a mapping with
    ``input_ids``) in transformers 5; ids may be tensors, numpy arrays or numpy scalars, and a batch of one
    (``[[...]]``) is unwrapped.

    Raises:
        TypeError: not list-like ids (a string, a mapping without ``input_ids``, a batch of several, a non-int id).
    """
    ids = tokenized_output
    if isinstance(ids, Mapping):
        ids = ids.get("input_ids", ids)
    elif hasattr(ids, "input_ids"):
        ids = ids.input_ids
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if isinstance(ids, tuple):
        ids = list(ids)
    if isinstance(ids, list) and len(ids) == 1 and isinstance(ids[0], (list, tuple)):
        ids = list(ids[0])  # a batch of one sequence
    if not isinstance(ids, list):
        raise TypeError(f"expected list-like token ids, got {type(ids).__name__}: {ids!r}")
    flat = []
    for token_id in ids:
        value = token_id.item() if hasattr(token_id, "item") else token_id
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise TypeError(f"token id must be an integer, got {type(token_id).__name__}: {token_id!r}")
        flat.append(int(value))
    return flat


def get_processor_token_id(processor: Any, token_name: str) -> int | None:
    """The id of a multimodal special token (``token_name`` ``image`` / ``video``) of a processor: its
    ``<name>_token_id``, else its ``<name>_token`` converted by its tokenizer; None when it has neither."""
    if processor is None:
        return None
    token_id = getattr(processor, f"{token_name}_token_id", None)
    if token_id is not None:
        return int(token_id)
    token = getattr(processor, f"{token_name}_token", None)
    tokenizer = getattr(processor, "tokenizer", None)
    if token is None or tokenizer is None:
        return None
    converted = tokenizer.convert_tokens_to_ids(token)
    return None if converted is None else int(converted)
