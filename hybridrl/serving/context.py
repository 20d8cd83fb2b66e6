"""What every endpoint handler shares: the engine call, tokenizer, limits, recorder, and the checks and
sampling parameters common to chat and completions requests."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from hybridrl.generation.tool_parser import ToolParser
from hybridrl.serving.admission import Admission
from hybridrl.serving.choices import Choice
from hybridrl.serving.errors import OpenAIError, invalid_request
from hybridrl.serving.prompts import PromptRenderer
from hybridrl.serving.requests import SamplingFields
from hybridrl.serving.types import CompletionRecord, CompletionRecorder, GenerateFn, ServeLimits


@dataclass(frozen=True)
class ServingContext:
    """The endpoint's configuration (built once by ``build_openai_app``; fields as its arguments)."""

    generate: GenerateFn
    tokenizer: Any
    model_name: str
    limits: ServeLimits
    chat_template_kwargs: dict[str, Any]
    recorder: CompletionRecorder | None
    renderer: PromptRenderer
    tool_parser: ToolParser  # of the app's ``tool_format``
    admission: Admission  # the in-flight sequence count of ``limits.max_inflight_sequences``
    accept_any_model: bool = False  # training: the policy answers whatever model name the user's agent uses

    def check_model(self, model: str) -> None:
        """404 unless ``model`` is the served model's name (or any name is accepted)."""
        if model != self.model_name and not self.accept_any_model:
            raise OpenAIError(
                404,
                f"The model '{model}' does not exist; this server serves '{self.model_name}' (GET /v1/models)",
                param="model",
                code="model_not_found",
            )

    def check_request(self, body: SamplingFields, max_tokens: int | None, max_tokens_field: str) -> int | None:
        """The request's ``max_tokens`` (None when absent) after the model, ``n`` and limit checks."""
        self.check_model(body.model)
        body.check_unsupported()
        if body.n > self.limits.max_n:
            raise invalid_request(f"'n' is {body.n}; this server allows at most {self.limits.max_n}", "n")
        if max_tokens is not None and max_tokens > self.limits.max_tokens:
            raise invalid_request(
                f"'{max_tokens_field}' is {max_tokens}; this server allows at most {self.limits.max_tokens} "
                "(rollout.response_length)",
                max_tokens_field,
            )
        return max_tokens

    def fit_prompt(
        self, prompt_ids: list[int], param: str, max_tokens: int | None, max_tokens_field: str, default: int
    ) -> int:
        """The ``max_tokens`` one choice of this prompt may generate: the request's, else ``default`` shortened to
        the room the model's context leaves. 400 (``context_length_exceeded``) when the prompt is over the prompt
        limit (``ServeLimits.prompt_limit``) or, with an explicit ``max_tokens``, prompt + ``max_tokens`` exceed
        the model's context."""
        limit, context = self.limits.prompt_limit(), self.limits.context_length
        if len(prompt_ids) > limit:
            clamp = (
                "" if limit == self.limits.max_prompt_tokens else f", clamped to the model's {context}-token context"
            )
            raise invalid_request(
                f"the prompt has {len(prompt_ids)} tokens; this server allows at most {limit} "
                f"(rollout.prompt_length{clamp})",
                param,
                code="context_length_exceeded",
            )
        room = default if context is None else context - len(prompt_ids)
        if max_tokens is None:
            return min(default, room)
        if max_tokens > room:
            raise invalid_request(
                f"the model's context is {context} tokens; the prompt has {len(prompt_ids)} and "
                f"'{max_tokens_field}' asks for {max_tokens}: lower '{max_tokens_field}' to at most {room} "
                "or shorten the prompt",
                max_tokens_field,
                code="context_length_exceeded",
            )
        return max_tokens

    def sampling_params(self, body: SamplingFields, max_tokens: int, client_logprobs: bool) -> dict[str, Any]:
        """The engine's ``sampling_params``: the request's values; unset ones are left to the rollout config.
        Log-probs are asked of the engine when the client wants them or a recorder keeps them."""
        params: dict[str, Any] = {
            "max_tokens": max_tokens,
            "logprobs": bool(client_logprobs or self.recorder is not None),
            "seed": body.seed,
        }
        for key in ("temperature", "top_p", "top_k"):
            if getattr(body, key) is not None:
                params[key] = getattr(body, key)
        return params

    def record(
        self,
        trajectory_id: str,
        prompt_ids: list[int],
        choice: Choice,
        request_messages: list[dict] | None = None,
        tools: list[dict] | None = None,
    ) -> None:
        """Hand one returned choice to the recorder (no-op without one)."""
        if self.recorder is None:
            return
        record = CompletionRecord(
            prompt_ids=list(prompt_ids),
            response_ids=list(choice.token_ids),
            response_logprobs=None if choice.log_probs is None else list(choice.log_probs),
            finish_reason=choice.finish_reason,
            request_messages=request_messages,
            tools=tools,
            choice_index=choice.index,
        )
        self.recorder.record(trajectory_id, record)


def response_header(prefix: str, model_name: str, object_name: str) -> dict[str, Any]:
    """``{"id", "object", "created", "model"}`` of a new response."""
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": object_name,
        "created": int(time.time()),
        "model": model_name,
    }


def usage(prompt_tokens: int, choices: list[Choice]) -> dict[str, int]:
    """OpenAI ``usage``: the prompt counted once per prompt, completion tokens over all choices."""
    completion_tokens = sum(len(choice.token_ids) for choice in choices)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
