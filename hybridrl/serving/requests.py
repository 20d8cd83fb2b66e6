"""Request bodies of ``/v1/chat/completions`` and ``/v1/completions`` (OpenAI's field names and ranges).

Unknown fields are ignored, as OpenAI-compatible servers do. Fields with no engine behind them are refused
with a 400 when set to a value that would change the result (``presence_penalty=0.5``, ``echo=true``, a
JSON ``response_format``, top-k alternatives in ``logprobs``); their neutral values are accepted.
``top_k`` is accepted as an extension (vLLM's), as is ``chat_template_kwargs`` on chat requests.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hybridrl.serving.errors import invalid_request

# OpenAI allows at most 4 stop sequences and 20 top log-probs.
MAX_STOP_SEQUENCES = 4
MAX_TOP_LOGPROBS = 20
# OpenAI's default max_tokens of the legacy completions API (chat has none: the limit applies).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
# OpenAI's seed is an int64 (choice i of a request samples with seed + i, within what the engines' generators take)
SEED_RANGE = (-(2**63), 2**63 - 1)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SamplingFields(_Lenient):
    """Fields shared by both endpoints."""

    model: str
    n: int = Field(1, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1)  # -1 or 0: off
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None
    metadata: dict[str, Any] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None

    def stop_strings(self) -> list[str]:
        """``stop`` as a list (empty strings dropped); 400 beyond 4."""
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > MAX_STOP_SEQUENCES:
            raise invalid_request(f"'stop' takes at most {MAX_STOP_SEQUENCES} sequences, got {len(stops)}", "stop")
        return [s for s in stops if s]

    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))

    def check_unsupported(self) -> None:
        """400 for penalties and logit biases (the engines here sample without them)."""
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name):
                raise invalid_request(f"'{name}' is not supported by this server (leave it unset or 0)", name)
        if self.logit_bias:
            raise invalid_request("'logit_bias' is not supported by this server", "logit_bias")


class ToolFunction(_Lenient):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None

    @field_validator("parameters")
    @classmethod
    def _a_json_schema_of_an_object(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        """``parameters`` must be a valid JSON Schema (its declared draft, else 2020-12) of ``type: object``."""
        if schema is None:
            return None
        from jsonschema import Draft202012Validator, SchemaError, validators

        try:
            validators.validator_for(schema, default=Draft202012Validator).check_schema(schema)
        except SchemaError as error:
            where = "/".join(str(part) for part in error.path) or "the root"
            raise ValueError(f"not a valid JSON Schema (at {where}): {error.message}") from None
        declared = schema.get("type")  # none declared: an object's schema
        if declared is not None and declared != "object":
            raise ValueError(f"must be a JSON Schema of type 'object', got type {declared!r}")
        return schema


class ToolSpec(_Lenient):
    """``{"type": "function", "function": {"name", "description", "parameters"}}``."""

    type: Literal["function"]
    function: ToolFunction


class ChatMessage(BaseModel):
    """One message; extra keys (``name``, ``reasoning_content``, ...) pass through to the chat template."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ChatCompletionRequest(SamplingFields):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def requested_max_tokens(self) -> int | None:
        """``max_completion_tokens`` (the current name) else ``max_tokens`` (deprecated for chat)."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def check_unsupported(self) -> None:
        super().check_unsupported()
        if self.top_logprobs:
            raise invalid_request(
                "'top_logprobs' > 0 is not supported: the engine returns only the sampled token's log-prob "
                "(use logprobs=true with top_logprobs unset or 0)",
                "top_logprobs",
            )
        if self.response_format and self.response_format.get("type") not in (None, "text"):
            raise invalid_request("only response_format {'type': 'text'} is supported", "response_format")


class CompletionRequest(SamplingFields):
    """``POST /v1/completions``: ``prompt`` is a string, a list of token ids, or a list of either."""

    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    def prompt_count(self) -> int:
        """How many prompts ``prompt`` holds (a string or an id list is one)."""
        single = isinstance(self.prompt, str) or (bool(self.prompt) and isinstance(self.prompt[0], int))
        return 1 if single else len(self.prompt)

    def check_unsupported(self) -> None:
        super().check_unsupported()
        if self.logprobs:
            raise invalid_request(
                "'logprobs' > 0 is not supported: the engine returns only the sampled token's log-prob "
                "(use logprobs=0 to get it)",
                "logprobs",
            )
        if self.echo:
            raise invalid_request("'echo' is not supported by this server", "echo")
        if self.suffix:
            raise invalid_request("'suffix' is not supported by this server", "suffix")
        if self.best_of is not None and self.best_of != self.n:
            raise invalid_request("'best_of' is not supported (leave it unset or equal to n)", "best_of")
