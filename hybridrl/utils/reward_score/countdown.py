"""Countdown scorer (the task TinyZero made popular): reach ``target`` with each given number once.

The completion must hold ``<answer>EQUATION</answer>``; the last such tag counts.
- no ``<answer>`` tag → 0.0
- the equation does not use exactly the given numbers (each once), is not plain arithmetic, or
  evaluates to another value (or divides by zero) → ``format_score`` (0.1)
- correct → ``score`` (1.0)

The equation is parsed with :mod:`ast` and evaluated by walking the tree (numbers, ``+ - * /``,
unary ``-``/``+``, parentheses); nothing is ever passed to ``eval``.

Deviation from TinyZero: it searched only the last line after a literal ``Assistant:`` marker because
its reward saw prompt + response; hybridrl's managers pass the response alone, so the whole response
is searched (a leading ``Assistant:``/``<|im_start|>assistant`` part, if present, is skipped as in TinyZero).
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Any

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_MAX_EQUATION_CHARS = 200


def extract_solution(solution_str: str) -> str | None:
    """The content of the last ``<answer>...</answer>`` tag, stripped, or None."""
    for marker in ("Assistant:", "<|im_start|>assistant"):
        if marker in solution_str:
            solution_str = solution_str.split(marker, 1)[1]
            break
    matches = _ANSWER.findall(solution_str)
    return matches[-1].strip() if matches else None


def validate_equation(equation_str: str, available_numbers: list[int]) -> bool:
    """True if the integers in the equation are exactly ``available_numbers`` (as a multiset)."""
    used = [int(n) for n in re.findall(r"\d+", equation_str)]
    return sorted(used) == sorted(int(n) for n in available_numbers)


def _eval_node(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval_node(node.left), _eval_node(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval_node(node.operand))
    raise ValueError(f"not plain arithmetic: {ast.dump(node)[:80]}")


def evaluate_equation(equation_str: str) -> float:
    """Evaluate ``+ - * / ( )`` over numbers without ``eval``. Raises ValueError/ZeroDivisionError."""
    if len(equation_str) > _MAX_EQUATION_CHARS or not re.fullmatch(r"[\d+\-*/().\s]+", equation_str):
        raise ValueError(f"equation has characters other than digits, + - * / ( ) . and spaces: {equation_str!r}")
    return float(_eval_node(ast.parse(equation_str, mode="eval")))


def compute_score(
    solution_str: str,
    ground_truth: dict[str, Any],
    method: str = "strict",
    format_score: float = 0.1,
    score: float = 1.0,
) -> float:
    """Score a countdown answer; ``ground_truth = {"target": int, "numbers": [int, ...]}``."""
    target, numbers = ground_truth["target"], list(ground_truth["numbers"])
    equation = extract_solution(solution_str)
    if equation is None:
        return 0.0
    if not validate_equation(equation, numbers):
        return format_score
    try:
        result = evaluate_equation(equation)
    except (ValueError, ZeroDivisionError, SyntaxError, OverflowError, RecursionError):
        return format_score
    return score if abs(result - float(target)) < 1e-5 else format_score
