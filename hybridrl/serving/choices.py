"""From a prompt to finished choices: n engine calls, ``stop`` strings, tool calls, log-prob objects.

    generate_choices(generate, trajectory_id, prompt_ids, params, n)   n engine calls (seed + i per choice)
      ──► cut_at_stop(tokenizer, output, stop)                          text + ids cut after a stop string
      ──► split_tool_calls(parser, text)                                content + OpenAI tool_calls

``stop`` strings are applied after generation (the async servers stop on EOS ids only): the engine
generates up to ``max_tokens``, then the response is cut. The returned text ends before the stop string
(OpenAI's rule); the returned and recorded token ids end with the token that completed it, so the ids
are a prefix of what the engine generated. Text is decoded with special tokens skipped (no ``<|im_end|>``).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from dataclasses import dataclass
from typing import Any

from hybridrl.generation.records import TokenOutput
from hybridrl.serving.errors import OpenAIError
from hybridrl.serving.types import GenerateFn

# TokenOutput.stop_reason -> OpenAI finish_reason ("abort" as vLLM names a request cut by a shutdown).
FINISH_REASONS = {"stop": "stop", "length": "length", "aborted": "abort"}


@dataclass(frozen=True)
class Choice:
    """One finished choice.

    token_ids / log_probs: the response ids and their log-probs (None unless asked of the engine),
    cut after a stop string. text: their decoded text (special tokens skipped, stop string excluded).
    finish_reason: OpenAI's. tool_calls: OpenAI ``tool_calls`` (None when the text has no well-formed call);
    content: the text without the tool-call blocks (the whole text when there is no call).
    """

    index: int
    token_ids: list[int]
    log_probs: list[float] | None
    text: str
    finish_reason: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None


async def generate_choices(
    generate: GenerateFn, trajectory_id: str, prompt_ids: list[int], params: dict[str, Any], n: int
) -> list[TokenOutput]:
    """``n`` concurrent engine calls under the request id ``trajectory_id`` (sticky routing); with a
    ``params["seed"]`` choice ``i`` samples with ``seed + i``. Any engine error becomes a 500."""

    def params_of(i: int) -> dict[str, Any]:
        seed = params.get("seed")
        return {**params, "seed": None if seed is None else int(seed) + i}

    calls = [generate(trajectory_id, prompt_ids=list(prompt_ids), sampling_params=params_of(i)) for i in range(n)]
    try:
        return list(await asyncio.gather(*calls))
    except OpenAIError:  # a generate wrapper refused the request itself (e.g. the training endpoint's checks)
        raise
    except Exception as error:  # noqa: BLE001 - the client gets a 500 naming the engine's error
        raise OpenAIError(
            500, f"the rollout engine failed: {type(error).__name__}: {error}", type="server_error"
        ) from error


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=True)


def cut_at_stop(tokenizer: Any, output: TokenOutput, stop: list[str]) -> tuple[list[int], list[float] | None, str, str]:
    """``(token_ids, log_probs, text, finish_reason)`` of ``output`` cut at its earliest stop string.

    The ids keep the shortest prefix whose text contains the stop string (found by bisection: a prefix's
    text grows with it); the text ends before the stop string.
    """
    ids, log_probs = list(output.token_ids), output.log_probs
    text = _decode(tokenizer, ids)
    finish_reason = FINISH_REASONS.get(output.stop_reason, output.stop_reason)
    found = [(text.find(s), s) for s in stop if s in text]
    if not found:
        return ids, log_probs, text, finish_reason
    position, stop_string = min(found)
    low, high = 1, len(ids)  # invariant: ids[:high] contains the stop string
    while low < high:
        middle = (low + high) // 2
        if stop_string in _decode(tokenizer, ids[:middle]):
            high = middle
        else:
            low = middle + 1
    return ids[:high], None if log_probs is None else list(log_probs[:high]), text[:position], "stop"


def split_tool_calls(
    parser: Any, text: str, tools: list[dict[str, Any]] | None = None
) -> tuple[str | None, list[dict[str, Any]] | None]:
    """``(content, tool_calls)``: the well-formed calls of ``text`` as OpenAI tool calls with fresh ids and
    the text without them (None when empty); ``(text, None)`` when the text has no well-formed call. ``tools``: the
    request's tool schemas (argument types for the formats that read them)."""
    parsed = parser.parse(text, tools)
    if not parsed.calls:
        return text, None
    calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in parsed.calls
    ]
    return parsed.content.strip() or None, calls


def finish_choice(
    index: int, output: TokenOutput, tokenizer: Any, stop: list[str], parser: Any | None,
    tools: list[dict[str, Any]] | None = None,
) -> Choice:
    """The choice of one engine output; ``parser`` None: no tool-call parsing (no tools, tool_choice none)."""
    ids, log_probs, text, finish_reason = cut_at_stop(tokenizer, output, stop)
    content, tool_calls = (text, None) if parser is None else split_tool_calls(parser, text, tools)
    if tool_calls:
        finish_reason = "tool_calls"
    return Choice(index, ids, log_probs, text, finish_reason, content, tool_calls)


def chat_logprobs(tokenizer: Any, choice: Choice) -> dict[str, Any]:
    """OpenAI chat ``logprobs``: one entry per returned token (no alternatives: ``top_logprobs`` is [])."""
    entries = []
    byte_level = _byte_level(tokenizer)
    for token_id, log_prob in zip(choice.token_ids, choice.log_probs or []):
        token = tokenizer.decode([token_id], skip_special_tokens=False)
        raw = _token_bytes(tokenizer, token_id) if byte_level else token.encode("utf-8")
        entries.append({"token": token, "logprob": float(log_prob), "bytes": list(raw), "top_logprobs": []})
    return {"content": entries}


def completion_logprobs(tokenizer: Any, choice: Choice) -> dict[str, Any]:
    """Legacy completions ``logprobs``: tokens, their log-probs and text offsets (no alternatives)."""
    tokens = [tokenizer.decode([token_id], skip_special_tokens=False) for token_id in choice.token_ids]
    offsets, position = [], 0
    for token in tokens:
        offsets.append(position)
        position += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": [float(lp) for lp in choice.log_probs or []],
        "top_logprobs": None,
        "text_offset": offsets,
    }


# ---- the raw bytes of a token ---------------------------------------------------------------------
# A byte-level BPE vocabulary (GPT-2, Qwen, Llama 3, SmolLM2) writes each byte as one printable character;
# a token that holds part of a multi-byte character decodes to "\ufffd" alone, but its bytes are exact.


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte <-> printable-character table, inverted (character -> byte)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(char): byte for byte, char in zip(printable, chars)}


def _byte_level(tokenizer: Any) -> bool:
    """True for a fast tokenizer whose decoder is ByteLevel."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend is not None and type(backend.decoder).__name__ == "ByteLevel"


def _token_bytes(tokenizer: Any, token_id: int) -> bytes:
    """The token's raw bytes (its vocabulary string mapped back through the byte table; UTF-8 for added tokens)."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    table = _byte_of_char()
    if token_id not in tokenizer.added_tokens_decoder and all(char in table for char in piece):
        return bytes(table[char] for char in piece)
    return piece.encode("utf-8")
