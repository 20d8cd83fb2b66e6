"""OpenAI function-tool schemas and the tool response record, at verl's path (``verl.tools.schemas``).

A tool YAML entry's ``tool_schema`` validates into :class:`OpenAIFunctionToolSchema`::

    {"type": "function",
     "function": {"name": "calculator", "description": "...",
                  "parameters": {"type": "object",
                                 "properties": {"expression": {"type": "string", "description": "..."}},
                                 "required": ["expression"]}}}

Field sets follow verl 0.9 (``type`` may be a list for unions, ``enum`` any JSON values, ``required`` and
``parameters`` optional). One deviation: a property keeps JSON-Schema keys verl drops (``items``,
``nullable``, ...), so an array parameter still tells the model its element type.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class OpenAIFunctionPropertySchema(BaseModel):
    """One parameter: ``type`` (``"integer"``, or ``["integer", "number"]`` for a union), description, enum."""

    model_config = ConfigDict(extra="allow")

    type: str | list[str]
    description: str | None = None
    enum: list[Any] | None = None


class OpenAIFunctionParametersSchema(BaseModel):
    """The parameters object: ``type`` (``"object"``), the properties by name, the required names."""

    type: str
    properties: dict[str, OpenAIFunctionPropertySchema]
    required: list[str] = Field(default_factory=list)


def _no_parameters() -> OpenAIFunctionParametersSchema:
    return OpenAIFunctionParametersSchema(type="object", properties={}, required=[])


class OpenAIFunctionSchema(BaseModel):
    """A function: name the model calls it by, description, parameters."""

    name: str
    description: str
    parameters: OpenAIFunctionParametersSchema = Field(default_factory=_no_parameters)
    strict: bool = False


class OpenAIFunctionToolSchema(BaseModel):
    """A tool in OpenAI format: ``type`` (``"function"``) and the function."""

    type: str
    function: OpenAIFunctionSchema


class OpenAIFunctionParsedSchema(BaseModel):
    """A parsed call before decoding: ``arguments`` is the JSON string the model wrote."""

    name: str
    arguments: str


class OpenAIFunctionCallSchema(BaseModel):
    """A decoded call: ``arguments`` is a dict."""

    name: str
    arguments: dict[str, Any]

    @staticmethod
    def from_openai_function_parsed_schema(
        parsed_schema: OpenAIFunctionParsedSchema,
    ) -> tuple[OpenAIFunctionCallSchema, bool]:
        """Decode the arguments; ``(call, has_decode_error)``, with ``{}`` arguments when they are not a JSON object."""
        try:
            arguments = json.loads(parsed_schema.arguments)
        except json.JSONDecodeError:
            arguments = None
        has_decode_error = not isinstance(arguments, dict)
        call = OpenAIFunctionCallSchema(name=parsed_schema.name, arguments={} if has_decode_error else arguments)
        return call, has_decode_error


class OpenAIFunctionToolCall(BaseModel):
    """A tool call in an assistant message: id, ``type="function"``, the decoded function call."""

    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunctionCallSchema


class ToolResponse(BaseModel):
    """What a tool returns to the conversation: text and/or lists of images / videos (each a list)."""

    text: str | None = None
    image: list[Any] | None = None
    video: list[Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _media_are_lists(cls, values: Any) -> Any:
        if isinstance(values, dict):
            for key in ("image", "video"):
                if values.get(key) is not None and not isinstance(values[key], list):
                    raise ValueError(
                        f"ToolResponse.{key} must be a list, got {type(values[key]).__name__}; "
                        f"wrap a single one as {key}=[item] in the tool's execute()"
                    )
        return values

    def is_empty(self) -> bool:
        return not self.text and not self.image and not self.video

    def is_text_only(self) -> bool:
        return bool(self.text) and not self.image and not self.video
