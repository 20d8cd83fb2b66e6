"""A safe arithmetic calculator tool: ``calculator(expression: str)``.

The expression is parsed with :mod:`ast` and evaluated node by node; only number literals, parentheses,
unary ``+``/``-`` and the binary operators ``+ - * / // % **`` are accepted (no names, calls, attributes,
``eval``). Python's semantics apply (``7 // 2 = 3``, ``-7 // 2 = -4``, ``7 / 2 = 3.5``). Results too large
to be useful are refused instead of computed (``9 ** 9 ** 9`` would take minutes).

The tool's response is the value (:func:`format_number`: ``"42"``, ``"3.5"``, an integral float as an
integer ``"2"``) or ``"Error: <reason>"`` for an expression it refuses; the metrics say which
(``{"invalid_expression": 0 or 1}``). The step reward is always 0.0.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from hybridrl.tools.base_tool import BaseTool
from hybridrl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

# Longer inputs are refused: no arithmetic question needs them, and parsing cost grows with length.
MAX_EXPRESSION_CHARS = 512
# Integer results (and intermediates) above this many bits (~3000 digits) are refused: a ** b can
# otherwise take unbounded time and memory.
MAX_INTEGER_BITS = 10_000
# Significant digits of a non-integral result.
FLOAT_SIGNIFICANT_DIGITS = 12

CALCULATOR_SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
            "parameters": {
                "type": "object",
                "properties": {
                    "expression": {"type": "string", "description": "The expression, e.g. '(12 + 30) * 7'."}
                },
                "required": ["expression"],
            },
        },
    }
)

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    """The expression is not allowed or has no finite real value."""


def evaluate_expression(expression: str) -> int | float:
    """The value of an arithmetic ``expression`` (see the module docstring).

    Raises:
        CalculatorError: syntax error, a construct other than numbers and the allowed operators,
            division by zero, a non-real or non-finite value, or a result over the size limits.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression ({exc.msg})") from None
    return _evaluate(tree.body)


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _checked(_apply(_BINARY[type(node.op)], left, right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise CalculatorError("'^' is not a power here: write a ** b")
    raise CalculatorError(f"'{ast.unparse(node)}' is not allowed (only numbers, + - * / // % ** and parentheses)")


def _apply(function: Callable[[Any, Any], Any], left: int | float, right: int | float) -> Any:
    try:
        return function(left, right)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("result too large") from None


def _check_power(base: int | float, exponent: int | float) -> None:
    """Refuse ``base ** exponent`` before computing it when its integer result would exceed the bit limit."""
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if (abs(base).bit_length() - 1) * exponent > MAX_INTEGER_BITS:
            raise CalculatorError(f"result too large (over {MAX_INTEGER_BITS} bits)")


def _checked(value: Any) -> int | float:
    if isinstance(value, complex):
        raise CalculatorError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not finite")
    if isinstance(value, int) and value.bit_length() > MAX_INTEGER_BITS:
        raise CalculatorError(f"result too large (over {MAX_INTEGER_BITS} bits)")
    return value


def format_number(value: int | float) -> str:
    """``42`` → ``"42"``, ``2.0`` → ``"2"``, ``1/3`` → ``"0.333333333333"`` (12 significant digits)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.{FLOAT_SIGNIFICANT_DIGITS}g}"
    return str(value)


class CalculatorTool(BaseTool):
    """``calculator(expression)``; stateless. ``tool_schema`` defaults to :data:`CALCULATOR_SCHEMA`."""

    def __init__(self, config: dict | None = None, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema or CALCULATOR_SCHEMA)

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        expression = parameters.get("expression")
        if not isinstance(expression, str):
            return ToolResponse(text="Error: give the expression as a string"), 0.0, {"invalid_expression": 1}
        try:
            value = evaluate_expression(expression)
        except CalculatorError as exc:
            return ToolResponse(text=f"Error: {exc}"), 0.0, {"invalid_expression": 1}
        return ToolResponse(text=format_number(value)), 0.0, {"invalid_expression": 0}
