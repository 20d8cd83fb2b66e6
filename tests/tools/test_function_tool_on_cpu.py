"""Function tools: schema from signature + docstring, sync/async calls, return normalisation, file loading."""

import asyncio
import textwrap
import threading
from typing import Literal

import pytest

from hybridrl.tools.function_tool import (
    FUNCTION_TOOL_REGISTRY,
    FunctionTool,
    function_tool,
    get_function_tool,
    load_function_tools_from_path,
    normalize_function_tool_return,
    schema_from_function,
)
from hybridrl.tools.schemas import ToolResponse


def convert(amount: float, unit: Literal["km", "mi"], digits: int | None = None, tags: list[str] = ()) -> str:
    """Convert a distance.

    Args:
        amount: the distance
        unit: the target unit
        digits: rounding digits
        tags: labels to echo
    """
    return f"{amount}{unit}"


def test_schema_from_signature_and_docstring():
    schema = schema_from_function(convert, "convert_distance").model_dump(exclude_none=True)
    function = schema["function"]
    assert function["name"] == "convert_distance" and function["description"] == "Convert a distance."
    properties = function["parameters"]["properties"]
    assert properties["amount"] == {"type": "number", "description": "the distance"}
    assert properties["unit"] == {"type": "string", "enum": ["km", "mi"], "description": "the target unit"}
    assert properties["digits"]["type"] == "integer" and properties["digits"]["nullable"] is True
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}, "description": "labels to echo"}
    assert function["parameters"]["required"] == ["amount", "unit"]  # defaults make the rest optional


def test_missing_docstring_line_is_a_clear_error():
    def bad(x: int, y: int) -> int:
        """Add.

        Args:
            x: the x
        """

    with pytest.raises(ValueError, match=r"function tool 'bad' .*cannot infer its schema: .*'Args:'"):
        schema_from_function(bad, "bad")


def test_variadic_parameters_are_refused():
    def spread(*values: int) -> int:
        """Sum.

        Args:
            values: numbers
        """

    with pytest.raises(ValueError, match=r"variadic parameters \['values'\]"):
        schema_from_function(spread, "spread")


def test_sync_function_runs_in_a_thread_and_async_in_the_loop():
    main_thread = threading.get_ident()

    def where() -> int:
        """Thread id."""
        return threading.get_ident()

    async def where_async() -> int:
        """Thread id."""
        return threading.get_ident()

    sync_tool = FunctionTool("where", where, schema_from_function(where, "where"))
    async_tool = FunctionTool("where_async", where_async, schema_from_function(where_async, "where_async"))
    assert not sync_tool.is_async and async_tool.is_async
    assert asyncio.run(sync_tool.call({})) != main_thread
    assert asyncio.run(async_tool.call({})) == main_thread
    response, reward, metrics = asyncio.run(async_tool.execute("any", {}))
    assert response.text == str(main_thread) and (reward, metrics) == (0.0, {})  # an int becomes str(value)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("plain", (ToolResponse(text="plain"), 0.0, {})),
        (7.5, (ToolResponse(text="7.5"), 0.0, {})),
        ({"ok": "é"}, (ToolResponse(text='{"ok": "é"}'), 0.0, {})),
        (ToolResponse(text="t"), (ToolResponse(text="t"), 0.0, {})),
        (("r", 1), (ToolResponse(text="r"), 1.0, {})),
        (("r", None, {"m": 1}), (ToolResponse(text="r"), 0.0, {"m": 1})),
        (("r", 0.0, None), (ToolResponse(text="r"), 0.0, {})),
    ],
)
def test_return_values_become_responses(value, expected):
    assert normalize_function_tool_return(value) == expected


def test_long_tuple_is_an_authoring_error():
    with pytest.raises(TypeError, match="tuple of length 4"):
        normalize_function_tool_return(("a", 1, {}, "extra"))


def test_decorator_forms_and_name_clash():
    @function_tool
    def ft_test_echo(text: str) -> str:
        """Echo.

        Args:
            text: what to echo
        """
        return text

    @function_tool(schema={"type": "function", "function": {"name": "ft_test_manual", "description": "hand-written"}})
    def manual() -> str:
        return "m"

    assert get_function_tool("ft_test_echo").fn is ft_test_echo
    assert FUNCTION_TOOL_REGISTRY["ft_test_manual"].tool_schema.function.description == "hand-written"

    def other(text: str) -> str:
        """Other.

        Args:
            text: t
        """

    with pytest.raises(ValueError, match="'ft_test_echo' is already registered"):
        function_tool("ft_test_echo")(other)
    with pytest.raises(KeyError, match="function tool 'absent' is not registered"):
        get_function_tool("absent")


def write(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def test_file_with_decorated_functions(tmp_path):
    path = write(
        tmp_path,
        "decorated.py",
        '''
        import asyncio
        from hybridrl.tools.function_tool import function_tool

        def helper(): ...

        @function_tool
        def ft_file_add(a: int, b: int) -> int:
            """Add.

            Args:
                a: first
                b: second
            """
            return a + b

        @function_tool("ft_file_wait")
        async def wait(seconds: float) -> dict:
            """Wait.

            Args:
                seconds: how long
            """
            await asyncio.sleep(seconds)
            return {"waited": seconds}
    ''',
    )
    tools = load_function_tools_from_path(path)
    assert [tool.name for tool in tools] == ["ft_file_add", "ft_file_wait"]
    assert load_function_tools_from_path(path) is tools  # loaded once
    assert asyncio.run(tools[0].execute("i", {"a": 2, "b": 3}))[0].text == "5"
    assert asyncio.run(tools[1].execute("i", {"seconds": 0}))[0].text == '{"waited": 0}'


def test_file_without_decorators_uses_all(tmp_path):
    path = write(
        tmp_path,
        "plain.py",
        '''
        __all__ = ["ft_plain_square"]

        def ft_plain_square(x: float) -> float:
            """Square a number.

            Args:
                x: the number
            """
            return x * x

        def not_exported(): ...
    ''',
    )
    [tool] = load_function_tools_from_path(path)
    assert tool.name == "ft_plain_square" and asyncio.run(tool.execute("i", {"x": 1.5}))[0].text == "2.25"


def test_file_with_no_tools_is_a_clear_error(tmp_path):
    path = write(tmp_path, "empty.py", "def f(): ...\n")
    with pytest.raises(ValueError, match="defines no tool: decorate the tool functions with @function_tool"):
        load_function_tools_from_path(path)
    with pytest.raises(FileNotFoundError, match="function_tool_path"):
        load_function_tools_from_path(str(tmp_path / "absent.py"))
