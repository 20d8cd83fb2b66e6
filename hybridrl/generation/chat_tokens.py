"""Token-in/token-out accounting of a multi-turn conversation with a chat template.

The agent loop keeps one growing token list and never re-tokenizes the conversation::

    prompt_ids(messages)                    system/user turns + generation prompt     (mask 0)
    + model ids, verbatim                   "<tool_call>...</tool_call><|im_end|>"    (mask 1)
    + turn_ids(tool_messages, last_id)      "\\n" + tool turn(s) + generation prompt  (mask 0)
    + model ids, verbatim                   "The answer is 42.<|im_end|>"             (mask 1)
    ...

Two drifts this avoids (verl users met both):

* **The end-of-turn tail.** The model stops on its EOS (``<|im_end|>``) but the template renders an
  assistant turn as ``content<|im_end|>\\n``. ``turn_ids`` appends what the template puts after the
  end-of-turn token (here ``"\\n"``). That tail is read off the template itself: a dummy conversation
  ending with an assistant message is rendered and the text after the assistant's content is taken.
* **Re-rendering earlier turns.** New messages are tokenized as a *delta*: the fixed base conversation
  ``[system, user, assistant]`` is rendered alone and followed by the new messages (+ generation prompt);
  the ids after the base's ids are the delta. Earlier turns of the real conversation are never rendered
  again, so templates that rewrite them (Qwen3 drops ``<think>`` from earlier assistant turns) do not
  change the trained tokens. The base must render as a prefix of base + new messages; a template that
  breaks this raises a ``ValueError`` naming the problem.

``check`` compares the token list with a full re-render (verl's
``multi_turn.tokenization_sanity_check_mode``): ``strict`` reports the first differing id,
``ignore_strippable`` ignores differences that are whitespace only once decoded, ``disable`` skips the
check. A re-render can differ for reasons that are no bug here and should be looked at, not hidden: a
template that rewrites earlier turns, or a model that produced a non-canonical tokenization of its text
(the same text, other ids than the tokenizer gives); the report says which.

verl's ``multi_turn.use_inference_chat_template`` (default False) chooses the prompt the *engine* sees
for the next turn: False sends the accumulated token list (what is trained on); True re-renders the
whole conversation with the model's chat template, as a deployed chat server would (e.g. without earlier
``<think>`` blocks). It does not change the trained tokens. With True the agent loop sends
``prompt_ids(all_messages_so_far)`` to the engine and still trains on the token list; the rollout
log-probs are then conditioned on a context other than the trained one.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

SANITY_CHECK_MODES = ("disable", "strict", "ignore_strippable")

# A fixed conversation the deltas are cut from; content never reaches the token list.
BASE_CONVERSATION = (
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hi."},
    {"role": "assistant", "content": "Base assistant reply 7319."},
)
_CONTEXT_TOKENS = 8  # ids shown on each side of a mismatch


@dataclass(frozen=True)
class TokenizationMismatch:
    """First difference between the agent loop's token list and a full re-render.

    position: index into the checked ``token_ids`` where they first differ.
    expected_ids: re-render ids from ``position`` (up to 8).
    actual_ids: the checked ids from ``position`` (up to 8).
    context_text: decoded text before the position, both sides after it, and the likely cause.
    """

    position: int
    expected_ids: list[int]
    actual_ids: list[int]
    context_text: str


class ChatTokens:
    """Token ids of a conversation's turns, cut from the chat template (see the module docstring).

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        tools: OpenAI function schemas passed as ``tools=`` to every render (only the first prompt's
            system turn shows them; deltas render them in the common base prefix, which is cut off).
        chat_template_kwargs: extra template variables for every render, e.g. ``{"enable_thinking": False}``.
        chat_template: a template replacing the tokenizer's (``data.custom_chat_template``); None keeps it.
    """

    def __init__(
        self,
        tokenizer: Any,
        tools: list[dict] | None = None,
        chat_template_kwargs: dict | None = None,
        chat_template: str | None = None,
    ):
        self.tokenizer = tokenizer
        self.tools = list(tools) if tools else None
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.chat_template = chat_template
        self._base_text = self._render(list(BASE_CONVERSATION), add_generation_prompt=False)
        self._base_ids = self._encode(self._base_text)
        self.turn_end_ids = self._derive_turn_end_ids()
        self._special_ids = _special_ids(tokenizer)

    # ---------------------------------------------------------------- rendering
    def _render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        kwargs = dict(self.chat_template_kwargs)
        if self.tools is not None:
            kwargs["tools"] = self.tools
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs
        )

    def _encode(self, text: str) -> list[int]:
        """Ids of ``text`` without BOS/EOS added (the template writes its own special tokens)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _derive_turn_end_ids(self) -> list[int]:
        """Ids the template renders after an assistant's content, e.g. ``[<|im_end|>, "\\n"]``."""
        content = BASE_CONVERSATION[-1]["content"]
        cut = self._base_text.rfind(content)
        if cut < 0:
            raise ValueError(
                "the chat template does not render an assistant message's content verbatim "
                f"(rendered {self._base_text!r}); token-in/token-out accounting needs a template that does"
            )
        tail_ids = self._encode(self._base_text[cut + len(content) :])
        if not tail_ids or self._base_ids[-len(tail_ids) :] != tail_ids:
            raise ValueError(
                f"the chat template's end of an assistant turn {self._base_text[cut + len(content) :]!r} does not "
                "tokenize on its own as inside the full render; it should start with an end-of-turn token"
            )
        return tail_ids

    # ---------------------------------------------------------------- the interface
    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """Ids of ``messages`` rendered with the generation prompt (text rendered, then encoded without
        added special tokens): the RL dataset's ``raw_prompt_ids`` when built with the same ``chat_template``
        and no tools/kwargs (the dataset renders neither; with them, these ids are the ones to generate from).

        Example (Qwen-style): ``<|im_start|>system\\n...<|im_end|>\\n<|im_start|>user\\n...<|im_end|>\\n``
        ``<|im_start|>assistant\\n`` — the model's first token follows.
        """
        return self._encode(self._render(messages, add_generation_prompt=True))

    def turn_ids(self, new_messages: list[dict], last_token_id: int | None) -> list[int]:
        """Ids to append after a model turn so the conversation continues with ``new_messages``.

        Returns ``missing_tail + delta``: the rest of the template's end of turn the model did not
        generate, then ``new_messages`` (tool/user) rendered as a delta, ending with the generation prompt.
        Example (Qwen-style, the model stopped on ``<|im_end|>``)::

            "\\n" "<|im_start|>user\\n<tool_response>\\n4\\n</tool_response><|im_end|>\\n" "<|im_start|>assistant\\n"

        ``last_token_id`` is the model turn's last id. If it is a special token of the template's end of
        turn (``<|im_end|>``), the tokens after it there are appended. Otherwise (no stop, a stop on another
        EOS id such as ``<|endoftext|>``, or None for a turn without tokens) the turn is closed with the
        template's whole end of turn (``<|im_end|>\\n``), kept after whatever the model generated.
        """
        return self.missing_tail(last_token_id) + self.delta_ids(new_messages)

    def missing_tail(self, last_token_id: int | None) -> list[int]:
        """The part of ``turn_end_ids`` that follows ``last_token_id`` (all of it if it is not in there)."""
        if last_token_id in self._special_ids and last_token_id in self.turn_end_ids:
            return self.turn_end_ids[self.turn_end_ids.index(last_token_id) + 1 :]
        return list(self.turn_end_ids)

    def delta_ids(self, new_messages: list[dict]) -> list[int]:
        """Ids of ``new_messages`` + generation prompt, rendered after the base conversation's closed turn."""
        text = self._render([*BASE_CONVERSATION, *new_messages], add_generation_prompt=True)
        if not text.startswith(self._base_text):
            at = _first_difference(self._base_text, text)
            raise ValueError(
                "the chat template is not prefix-stable: appending messages changes how the earlier turns "
                f"render (char {at}: {self._base_text[at - 20 : at + 20]!r} became {text[at - 20 : at + 20]!r}); "
                "the delta of new messages cannot be cut from it"
            )
        ids = self._encode(text)
        if ids[: len(self._base_ids)] != self._base_ids:
            raise ValueError(
                "the chat template's text is prefix-stable but its tokens are not: the new messages' first "
                f"tokens merge with the end of the previous turn ({text[len(self._base_text) - 10 :][:30]!r}); "
                "the template should separate turns with special tokens"
            )
        return ids[len(self._base_ids) :]

    def assistant_content(self, generated_ids: list[int]) -> str:
        """The text a re-render needs as the assistant message for a model turn: the ids decoded with
        special tokens kept, less the end-of-turn ids the template adds itself (``...<|im_end|>`` → ``...``)."""
        end = len(generated_ids)
        if end and generated_ids[-1] in self._special_ids and generated_ids[-1] in self.turn_end_ids:
            k = self.turn_end_ids.index(generated_ids[-1])
            if generated_ids[end - k - 1 :] == self.turn_end_ids[: k + 1]:
                end -= k + 1
        return self.tokenizer.decode(generated_ids[:end], skip_special_tokens=False)

    # ---------------------------------------------------------------- sanity check
    def check(self, messages: list[dict], token_ids: list[int], mode: str) -> TokenizationMismatch | None:
        """Compare ``token_ids`` with ``messages`` re-rendered whole; None when they agree (or ``disable``).

        ``messages`` is the full conversation, assistant contents being the decoded model turns
        (``assistant_content``). A conversation ending with an assistant turn is compared after closing
        ``token_ids`` with ``missing_tail`` (the tail is never generated); one ending with tool/user
        messages is compared with the render that ends with the generation prompt. Give assistant messages
        their raw text (tool calls included as generated), not structured ``tool_calls``: a template
        re-serializes those its own way, which the model's tokens do not follow.
        """
        if mode not in SANITY_CHECK_MODES:
            raise ValueError(
                f"multi_turn.tokenization_sanity_check_mode must be one of {SANITY_CHECK_MODES}, got {mode!r}"
            )
        if mode == "disable":
            return None
        actual = list(token_ids)
        ends_with_model_turn = bool(messages) and messages[-1]["role"] == "assistant"
        if ends_with_model_turn:
            actual = actual + self.missing_tail(actual[-1] if actual else None)
        expected = self._encode(self._render(messages, add_generation_prompt=not ends_with_model_turn))
        if mode == "strict":
            at = _first_difference(expected, actual)
            return None if at == len(expected) == len(actual) else self._mismatch(expected, actual, at, at)
        for _, i1, i2, j1, j2 in _differences(expected, actual):
            if not self._whitespace_only(expected[i1:i2], actual[j1:j2]):
                return self._mismatch(expected, actual, i1, j1)
        return None

    def _whitespace_only(self, expected_chunk: list[int], actual_chunk: list[int]) -> bool:
        """True when the two chunks' texts differ, but only in whitespace."""
        expected_text = self.tokenizer.decode(expected_chunk, skip_special_tokens=False)
        actual_text = self.tokenizer.decode(actual_chunk, skip_special_tokens=False)
        return expected_text != actual_text and "".join(expected_text.split()) == "".join(actual_text.split())

    def _mismatch(self, expected: list[int], actual: list[int], i: int, j: int) -> TokenizationMismatch:
        def decode(ids: list[int]) -> str:
            return self.tokenizer.decode(ids, skip_special_tokens=False)

        expected_after, actual_after = decode(expected[i:]), decode(actual[j:])
        cause = (
            "same text, other ids: the model's tokenization of this text is not the tokenizer's canonical one"
            if expected_after == actual_after
            else "the texts differ: the template renders this conversation otherwise (a missing/extra end-of-turn "
            "tail, a template that rewrites earlier turns, or content that does not round-trip)"
        )
        context = (
            f"before: {decode(actual[max(0, j - _CONTEXT_TOKENS) : j])!r} | "
            f"re-render: {decode(expected[i : i + _CONTEXT_TOKENS])!r} | "
            f"token list: {decode(actual[j : j + _CONTEXT_TOKENS])!r} | {cause}"
        )
        return TokenizationMismatch(j, expected[i : i + _CONTEXT_TOKENS], actual[j : j + _CONTEXT_TOKENS], context)


def _differences(expected: list[int], actual: list[int]) -> list[tuple[str, int, int, int, int]]:
    """difflib opcodes (tag, i1, i2, j1, j2) of the non-equal spans of two id lists, in order."""
    matcher = difflib.SequenceMatcher(None, expected, actual, autojunk=False)
    return [op for op in matcher.get_opcodes() if op[0] != "equal"]


def _first_difference(a: str | list[int], b: str | list[int]) -> int:
    """Index of the first item where ``a`` and ``b`` differ (the shorter length if one is a prefix of the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _special_ids(tokenizer: Any) -> set[int]:
    """Ids of the tokenizer's special tokens (EOS, end-of-turn and other added special tokens)."""
    ids = set(tokenizer.all_special_ids)
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    ids.update(token_id for token_id, token in added.items() if getattr(token, "special", False))
    return ids
