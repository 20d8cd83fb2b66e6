"""Chat prompts as token ids: ``ChatTokens.prompt_ids`` per (tools, template kwargs), cached."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from hybridrl.generation.chat_tokens import ChatTokens
from hybridrl.serving.errors import invalid_request

_RENDERER_CACHE_SIZE = 64  # distinct (tools, template kwargs) pairs kept; agents reuse a handful


class PromptRenderer:
    """``ChatTokens`` per (tools, template kwargs), cached: building one renders the template a few times."""

    def __init__(self, tokenizer: Any, chat_template_kwargs: dict[str, Any]) -> None:
        """Renders a tool-less prompt once, so a template ``ChatTokens`` cannot use fails at startup
        (ValueError naming the problem) rather than on every request."""
        self.tokenizer = tokenizer
        self._cache: OrderedDict[str, ChatTokens] = OrderedDict()
        self._cache[self._key(None, chat_template_kwargs)] = ChatTokens(
            tokenizer, chat_template_kwargs=chat_template_kwargs
        )

    @staticmethod
    def _key(tools: list[dict] | None, template_kwargs: dict[str, Any]) -> str:
        return json.dumps([tools, template_kwargs], sort_keys=True, default=str)

    def chat_tokens(self, tools: list[dict] | None, template_kwargs: dict[str, Any]) -> ChatTokens:
        """The (cached) ``ChatTokens`` of these tools and template kwargs."""
        key = self._key(tools, template_kwargs)
        if key not in self._cache:
            self._cache[key] = ChatTokens(self.tokenizer, tools=tools, chat_template_kwargs=template_kwargs)
            if len(self._cache) > _RENDERER_CACHE_SIZE:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return self._cache[key]

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None, template_kwargs: dict[str, Any],
                   trajectory_id: str | None = None) -> list[int]:
        """The generation prompt's ids (``trajectory_id``: unused here, see ``ContinuationRenderer``); a template
        error is a 400 naming it."""
        try:
            return self.chat_tokens(tools, template_kwargs).prompt_ids(messages)
        except Exception as error:  # noqa: BLE001 - jinja raises many types; the client sent what failed
            raise invalid_request(
                f"the chat template could not render these messages: {type(error).__name__}: {error}", "messages"
            ) from error
