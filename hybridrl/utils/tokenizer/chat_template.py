"""Chat-template probes for multi-turn token accounting, with verl 0.9's names (``verl.utils.tokenizer.chat_template``).

A multi-turn rollout grows one token list turn by turn instead of re-rendering the conversation. Two pieces of
the template are needed for that, and both are read off the template by rendering small probe conversations:

    initialize_system_prompt      the ids a template puts before the first message (a default system turn)
    initialize_turn_separator     the ids a template puts after a turn's closing token (Qwen: ``"\\n"``), which
                                  the model never generates because it stops on the closing token
    extract_system_prompt_and_generation   the system prefix and the generation prompt (``<|im_start|>assistant\\n``)

Probes use user turns only: an assistant probe would pick up reasoning scaffolding (Qwen3's ``<think></think>``)
that is no part of the separator. ``apply_chat_template`` renders messages that lack a user turn (tool results
alone) for templates that refuse them, by rendering a dummy user turn first and cutting it off.

hybridrl's agent loop does its own accounting from rendered text (:mod:`hybridrl.generation.chat_tokens`); these
token-level helpers serve code written against verl's.
"""

from __future__ import annotations

from typing import Any

from hybridrl.utils.tokenizer.tokenizer import normalize_token_ids

__all__ = [
    "apply_chat_template",
    "extract_system_prompt_and_generation",
    "initialize_system_prompt",
    "initialize_turn_separator",
]


def _render_ids(tokenizer: Any, messages: list[dict], add_generation_prompt: bool, **kwargs: Any) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True, **kwargs)
    return normalize_token_ids(ids)


def initialize_system_prompt(tokenizer: Any, **apply_chat_template_kwargs: Any) -> list[int]:
    """The ids a template renders before the first message ([] when it adds no default system turn).

    One empty user turn renders as ``S + U`` and two as ``S + U + U``; the system prefix ``S`` is the first
    ``len(S + U) − len(U)`` ids, where ``len(U)`` is the difference of the two lengths.
    """
    one = _render_ids(tokenizer, [{"role": "user", "content": ""}], False, **apply_chat_template_kwargs)
    two = _render_ids(tokenizer, [{"role": "user", "content": ""}] * 2, False, **apply_chat_template_kwargs)
    turn_length = len(two) - len(one)
    return one[: len(one) - turn_length]


def _eos_ids(tokenizer: Any) -> set[int]:
    """The closing token id(s): the tokenizer's ``eos_token_id`` (an int or a list, as Llama 3's), or that of a
    processor's wrapped tokenizer."""
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        eos = getattr(getattr(tokenizer, "tokenizer", None), "eos_token_id", None)
    if eos is None:
        return set()
    return {eos} if isinstance(eos, int) else set(eos)


def _probe_user_turns(tokenizer: Any, **kwargs: Any) -> tuple[list[int], list[int]] | None:
    """One user turn rendered with an empty and a non-empty body: string content, else a list of text parts
    (multimodal processors refuse strings); None when neither renders."""
    for empty, filled in (("", "x"), ([{"type": "text", "text": ""}], [{"type": "text", "text": "x"}])):
        try:
            return (
                _render_ids(tokenizer, [{"role": "user", "content": empty}], False, **kwargs),
                _render_ids(tokenizer, [{"role": "user", "content": filled}], False, **kwargs),
            )
        except Exception:  # a template's own error on this content form: try the other form
            continue
    return None


def initialize_turn_separator(tokenizer: Any, **apply_chat_template_kwargs: Any) -> list[int]:
    """The ids a template puts after a turn's closing token and before the next turn ([] when none).

    The two probe renders differ only in the body, so their longest common suffix is the turn's end: the
    closing token(s) then the separator. The separator is what follows the last closing (eos) id in that suffix
    (or, with no eos id in it, the suffix less its first id). An unexpected template gives [], so callers keep
    their behaviour rather than fail.
    """
    probes = _probe_user_turns(tokenizer, **apply_chat_template_kwargs)
    if probes is None:
        return []
    empty, filled = probes
    common = 0
    while common < min(len(empty), len(filled)) and empty[-1 - common] == filled[-1 - common]:
        common += 1
    suffix = empty[len(empty) - common :]
    eos_ids = _eos_ids(tokenizer)
    closing = [index for index, token_id in enumerate(suffix) if token_id in eos_ids]
    return suffix[closing[-1] + 1 :] if closing else suffix[1:]


def extract_system_prompt_and_generation(
    tokenizer: Any, **apply_chat_template_kwargs: Any
) -> tuple[list[int], list[int]]:
    """``(system prefix ids, generation prompt ids)``: the generation prompt is what ``add_generation_prompt``
    appends to one rendered user turn."""
    system_prompt = initialize_system_prompt(tokenizer, **apply_chat_template_kwargs)
    user = [{"role": "user", "content": ""}]
    closed = _render_ids(tokenizer, user, False, **apply_chat_template_kwargs)
    opened = _render_ids(tokenizer, user, True, **apply_chat_template_kwargs)
    return system_prompt, opened[len(closed) :]


def _strip_prefix(output: Any, prefix: Any, tokenize: bool, return_dict: bool) -> Any:
    """``output`` less the render of the dummy user turn that precedes the real messages."""
    if not tokenize:
        return output[len(prefix) :]
    if not return_dict:
        if output and isinstance(output[0], list):  # transformers 5: a batch of one
            output, prefix = output[0], prefix[0]
        return output[len(prefix) :]
    output, prefix_length = dict(output), prefix["input_ids"].shape[1]
    for key in ("input_ids", "attention_mask", "mm_token_type_ids"):
        if key in output:
            output[key] = output[key][:, prefix_length:]
    return output


def apply_chat_template(
    processor: Any,
    messages: list[dict],
    *,
    tokenize: bool = True,
    add_generation_prompt: bool = True,
    tools: list[dict] | None = None,
    return_dict: bool = False,
    **kwargs: Any,
) -> Any:
    """``processor.apply_chat_template`` that also renders messages without a user turn (e.g. tool results
    alone) for templates that require one (Qwen3.5): on the template's error, a dummy empty user turn is
    rendered before the messages and its render cut off the result.

    Returns:
        The ids (``tokenize``), the text, or the dict of tensors (``return_dict``), as the processor returns them.
    """
    options = dict(tokenize=tokenize, tools=tools, return_dict=return_dict, **kwargs)
    try:
        return processor.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **options)
    except Exception:  # the template refuses these messages alone: render them after a dummy user turn
        dummy = [{"role": "user", "content": [{"type": "text", "text": ""}]}]
        prefix = processor.apply_chat_template(dummy, add_generation_prompt=False, **options)
        output = processor.apply_chat_template(dummy + messages, add_generation_prompt=add_generation_prompt, **options)
        return _strip_prefix(output, prefix, tokenize, return_dict)
