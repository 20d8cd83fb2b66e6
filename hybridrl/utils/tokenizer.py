"""Tokenizer loading with verl's conventions (``hf_tokenizer``): a pad token always exists."""

from __future__ import annotations

import logging
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
    """A multimodal processor if the folder has one, else ``None`` (verl returns None for text models)."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(name_or_path, trust_remote_code=trust_remote_code, **kwargs)
    except Exception:  # text-only folders have no processor config; verl swallows this too
        return None
    # AutoProcessor falls back to the tokenizer for text-only models: that is not a processor.
    if processor is None or "Processor" not in type(processor).__name__:
        return None
    return processor
