"""Argument values that XML-style formats write as text, read back as JSON values.

Two readings, as in verl 0.9's parsers:

- :func:`json_or_text` (glm, seed, minimax, deepseek_v4 with ``string="false"``): the stripped text as JSON when it
  parses (``5`` → 5, ``{"a": 1}`` → a dict), else the text itself (``Beijing`` → ``"Beijing"``);
- :func:`typed_value` (qwen3_coder): the value converted by the parameter's declared JSON-schema ``type``, the text
  unchanged for a string, an undeclared parameter or a value that does not convert.
"""

from __future__ import annotations

import ast
import json
import logging
from typing import Any

logger = logging.getLogger(__name__)

_STRING_TYPES = ("string", "str", "text", "varchar", "char", "enum")
_INTEGER_PREFIXES = ("int", "uint", "long", "short", "unsigned")


def json_or_text(raw: str) -> Any:
    """``raw`` stripped, decoded as JSON when it is JSON, else the stripped text."""
    value = raw.strip()
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def typed_value(raw: str, schema: dict[str, Any] | None) -> Any:
    """``raw`` converted by ``schema["type"]`` (a parameter's JSON schema; None: undeclared, kept as text).

    ``null`` is None whatever the type; integers and numbers (an integral number becomes an int); booleans
    (anything but ``true`` is False); objects and arrays as JSON, else as a Python literal; text otherwise.
    """
    if raw.lower() == "null":
        return None
    if schema is None:
        return raw
    kind = str(schema["type"] if "type" in schema else "string").strip().lower()  # JSON schema: untyped = string
    if kind in _STRING_TYPES:
        return raw
    if kind.startswith(_INTEGER_PREFIXES):
        return _or_text(raw, int)
    if kind.startswith(("num", "float")):
        number = _or_text(raw, float)
        return int(number) if isinstance(number, float) and number.is_integer() else number
    if kind in ("boolean", "bool", "binary"):
        return raw.lower() == "true"
    return _literal(raw)


def _or_text(raw: str, convert: type) -> Any:
    try:
        return convert(raw)
    except ValueError:
        logger.info("tool-call argument %r is not a %s; kept as text", raw, convert.__name__)
        return raw


def _literal(raw: str) -> Any:
    """JSON first, then a Python literal (never ``eval``: the text is model output), else the text."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        logger.info("tool-call argument %r is neither JSON nor a Python literal; kept as text", raw[:200])
        return raw
