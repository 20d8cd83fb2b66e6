"""verl 0.7–0.8's path of the chat-template helpers (``verl.utils.chat_template``); verl 0.9 moved them to
:mod:`hybridrl.utils.tokenizer.chat_template`, which this module re-exports."""

from hybridrl.utils.tokenizer.chat_template import (
    apply_chat_template,
    extract_system_prompt_and_generation,
    initialize_system_prompt,
    initialize_turn_separator,
)

__all__ = [
    "apply_chat_template",
    "extract_system_prompt_and_generation",
    "initialize_system_prompt",
    "initialize_turn_separator",
]
