"""Exact multi-turn prompts through the OpenAI endpoint: splice the model's own tokens back into replayed history.

A client replays a conversation as text: its next request repeats the previous request's messages, then the
assistant message it received, then new messages (tool results, a user turn). Rendering that history with the
chat template re-tokenizes the assistant's text, which rarely gives back the ids the model generated (tool-call
JSON re-serialised, whitespace, non-canonical tokenization). When the replay is faithful this renderer builds the
prompt from tokens instead, exactly as hybridrl's agent loops do::

    prompt(next) = prompt(previous) + generated ids (previous) + ChatTokens.turn_ids(new messages)

so every turn of the conversation extends the previous one token for token and the trainer sees what the model
generated. "Faithful" means: same tools and template kwargs, the previous messages unchanged, and an assistant
message whose text and tool calls (name + arguments) are the ones the endpoint returned. Anything else is rendered
in full (and starts a new chain in ``trajectory_samples``).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from hybridrl.serving.choices import split_tool_calls
from hybridrl.serving.prompts import PromptRenderer

__all__ = ["ContinuationRenderer"]

_MAX_TRAJECTORIES = 4096  # conversations remembered (oldest dropped first)


@dataclass
class _Turn:
    """The last request of a trajectory: what was rendered, and (once recorded) what the model answered."""

    messages: list[dict]
    key: str  # tools + template kwargs
    prompt_ids: list[int]
    response_ids: list[int] | None = None
    answer: tuple[str, list[tuple[str, str]]] | None = None  # (content, [(tool name, normalised arguments)])


def _normal_arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments.strip()
    return json.dumps(arguments, sort_keys=True)


def _answer_of(message: dict) -> tuple[str, list[tuple[str, str]]]:
    """What an assistant message says: its text and its tool calls as (name, normalised arguments)."""
    functions = [call.get("function") or {} for call in message.get("tool_calls") or []]
    calls = [(str(f.get("name") or ""), _normal_arguments(f.get("arguments"))) for f in functions]
    return (message.get("content") or "").strip(), calls


class ContinuationRenderer(PromptRenderer):
    """A ``PromptRenderer`` that continues a trajectory's previous prompt with tokens (see the module docstring).

    Args:
        tokenizer: the model's tokenizer.
        chat_template_kwargs: template variables for every request.
        tool_parser: the endpoint's ``ToolParser`` (to know which tool calls the client was given).
    """

    def __init__(self, tokenizer: Any, chat_template_kwargs: dict[str, Any], tool_parser: Any) -> None:
        super().__init__(tokenizer, chat_template_kwargs)
        self.tool_parser = tool_parser
        self._turns: OrderedDict[str, _Turn] = OrderedDict()
        self.continued = 0  # prompts built from tokens (for tests and metrics)

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None, template_kwargs: dict[str, Any],
                   trajectory_id: str | None = None) -> list[int]:
        key = self._key(tools, template_kwargs)
        previous = self._turns.get(trajectory_id) if trajectory_id else None
        ids = self._continue(previous, messages, key, tools, template_kwargs) if previous else None
        if ids is None:
            ids = super().prompt_ids(messages, tools, template_kwargs)
        else:
            self.continued += 1
        if trajectory_id:
            self._turns[trajectory_id] = _Turn([dict(m) for m in messages], key, list(ids))
            self._turns.move_to_end(trajectory_id)
            if len(self._turns) > _MAX_TRAJECTORIES:
                self._turns.popitem(last=False)
        return ids

    def observe(
        self, trajectory_id: str, response_ids: list[int], tools_enabled: bool, tools: list[dict] | None = None
    ) -> None:
        """The model's answer to the trajectory's last prompt (its first choice): ids and what the client got
        (``tools``: the request's tool schemas, read by the formats that type arguments)."""
        turn = self._turns.get(trajectory_id)
        if turn is None or turn.response_ids is not None:
            return
        turn.response_ids = list(response_ids)
        text = self.tokenizer.decode(response_ids, skip_special_tokens=True)
        content, calls = split_tool_calls(self.tool_parser, text, tools) if tools_enabled else (text, None)
        turn.answer = _answer_of({"content": content, "tool_calls": calls})

    def forget(self, trajectory_id: str) -> None:
        self._turns.pop(trajectory_id, None)

    def _continue(self, previous: _Turn, messages: list[dict], key: str, tools: list[dict] | None,
                  template_kwargs: dict[str, Any]) -> list[int] | None:
        """The spliced prompt, or None when the history is not a faithful replay of ``previous``."""
        n = len(previous.messages)
        if (previous.response_ids is None or key != previous.key or len(messages) <= n + 1
                or messages[:n] != previous.messages or messages[n].get("role") != "assistant"
                or _answer_of(messages[n]) != previous.answer):
            return None
        last = previous.response_ids[-1] if previous.response_ids else None
        try:
            added = self.chat_tokens(tools, template_kwargs).turn_ids(messages[n + 1:], last)
        except Exception:  # noqa: BLE001 - the template cannot render these messages alone: render in full
            return None
        return previous.prompt_ids + previous.response_ids + added
