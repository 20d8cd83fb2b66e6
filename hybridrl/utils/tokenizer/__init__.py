"""Tokenizer loading and token-id helpers at verl 0.9's path ``verl.utils.tokenizer``; the chat-template probes
are in :mod:`hybridrl.utils.tokenizer.chat_template`; :mod:`hybridrl.utils.tokenizer.qwen_vl_processor` is the image-only
Qwen-VL processor ``hf_processor`` returns where transformers' own cannot be built (no torchvision)."""

from hybridrl.utils.tokenizer.tokenizer import (
    get_processor_token_id,
    hf_processor,
    hf_tokenizer,
    normalize_token_ids,
    set_pad_token_id,
)

__all__ = ["get_processor_token_id", "hf_processor", "hf_tokenizer", "normalize_token_ids", "set_pad_token_id"]
