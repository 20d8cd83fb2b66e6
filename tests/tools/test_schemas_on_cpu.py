"""hybridrl.tools.schemas / base_tool: verl's schema models and the BaseTool defaults."""

import asyncio

import pytest
from pydantic import ValidationError

from hybridrl.tools.base_tool import BaseTool, OpenAIFunctionToolSchema, ToolResponse
from hybridrl.tools.schemas import (
    OpenAIFunctionCallSchema,
    OpenAIFunctionParsedSchema,
    OpenAIFunctionToolCall,
)

ADD_SCHEMA = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "description": "first"},
                "xs": {"type": "array", "items": {"type": "number"}, "description": "numbers"},
            },
            "required": ["a"],
        },
    },
}


def test_tool_schema_round_trip_keeps_items():
    schema = OpenAIFunctionToolSchema.model_validate(ADD_SCHEMA)
    assert schema.function.name == "add" and schema.function.strict is False
    assert schema.function.parameters.required == ["a"]
    # `items` is kept (verl drops it): an array parameter still names its element type.
    assert schema.model_dump(exclude_unset=True, exclude_none=True) == ADD_SCHEMA


def test_function_without_parameters_defaults_to_empty_object():
    schema = OpenAIFunctionToolSchema.model_validate(
        {"type": "function", "function": {"name": "now", "description": "d"}}
    )
    assert schema.function.parameters.model_dump() == {"type": "object", "properties": {}, "required": []}


def test_union_types_and_non_string_enum():
    prop = OpenAIFunctionToolSchema.model_validate(
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {
            "type": "object", "properties": {"k": {"type": ["integer", "number"], "enum": [1, 2.5]}}}}}
    ).function.parameters.properties["k"]  # fmt: skip
    assert prop.type == ["integer", "number"] and prop.enum == [1, 2.5]


@pytest.mark.parametrize(
    "arguments, expected, has_error",
    [('{"a": 1}', {"a": 1}, False), ("{not json", {}, True), ("[1, 2]", {}, True), ('"s"', {}, True)],
)
def test_parsed_call_decoding(arguments, expected, has_error):
    call, error = OpenAIFunctionCallSchema.from_openai_function_parsed_schema(
        OpenAIFunctionParsedSchema(name="add", arguments=arguments)
    )
    assert (call.name, call.arguments, error) == ("add", expected, has_error)


def test_tool_call_type_is_function():
    call = OpenAIFunctionToolCall(id="c1", function=OpenAIFunctionCallSchema(name="add", arguments={}))
    assert call.type == "function"


def test_tool_response_media_must_be_lists():
    assert ToolResponse(text="hi").is_text_only() and ToolResponse().is_empty()
    assert ToolResponse(image=["img"]).image == ["img"]
    with pytest.raises(ValidationError, match=r"wrap a single one as image=\[item\]"):
        ToolResponse(image="img")


def test_base_tool_defaults_follow_verl_0_9():
    tool = BaseTool({"type": "native"}, ADD_SCHEMA)  # a dict schema is validated
    assert tool.name == "add" and tool.config == {"type": "native"}
    instance_id, created = asyncio.run(tool.create())
    assert len(instance_id) == 36 and created == ToolResponse()  # uuid4 string
    assert asyncio.run(tool.create("given"))[0] == "given"
    assert asyncio.run(tool.execute("given", {})) == (ToolResponse(text="Updated the tool state."), 0.0, {})
    assert asyncio.run(tool.calc_reward("given")) == 0.0
    assert asyncio.run(tool.release("given")) is None


def test_base_tool_without_schema_is_a_clear_error():
    with pytest.raises(ValueError, match="BaseTool has no tool schema: give `tool_schema` in the tool YAML"):
        BaseTool({}, None)


def test_subclass_may_supply_its_schema():
    class Clock(BaseTool):
        def get_openai_tool_schema(self):
            return OpenAIFunctionToolSchema.model_validate(
                {"type": "function", "function": {"name": "clock", "description": "d"}}
            )

    assert Clock({}, None).name == "clock"
