"""Reward of the calculator agent (verl's ``custom_reward_function`` signature).

    custom_reward_function.path=examples/agent_calculator/reward.py custom_reward_function.name=compute_score

``solution_str`` is the whole decoded response of a multi-turn rollout, special tokens skipped, e.g.::

    <tool_call>{"name": "calculator", "arguments": {"expression": "347*829"}}</tool_call>
    tool
    287663
    assistant
    #### 287663

Returns ``{"score", "acc", "tool_call"}``:

- ``score`` = ``acc`` = 1.0 when the final answer is the exact product, else 0.0. The final answer is the
  last ``#### <integer>`` after the last tool call (an answer written before a later call is not final;
  the tool's own responses never contain ``####``).
- ``tool_call`` = 1.0 when the response holds a well-formed call of the calculator: ``<tool_call>`` +
  a JSON object ``{"name": "calculator", "arguments": {"expression": <str>}}`` + ``</tool_call>``
  (what the ``hermes`` parser accepts), else 0.0. It does not enter the score; validation reports its
  mean as ``val-aux/agent_calculator/tool_call/mean@1``.
"""

from __future__ import annotations

import json
import re
from typing import Any

TOOL_NAME = "calculator"
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FINAL_ANSWER = re.compile(r"####\s*(-?\d+)")


def is_calculator_call(payload: str) -> bool:
    """Whether the text between ``<tool_call>`` and ``</tool_call>`` is a valid calculator call."""
    try:
        call = json.loads(payload.strip())
    except json.JSONDecodeError:
        return False
    if not isinstance(call, dict) or call.get("name") != TOOL_NAME:
        return False
    arguments = call.get("arguments")
    return isinstance(arguments, dict) and isinstance(arguments.get("expression"), str)


def has_wellformed_tool_call(solution_str: str) -> bool:
    """Whether any ``<tool_call>...</tool_call>`` block of the response is a valid calculator call."""
    return any(is_calculator_call(match.group(1)) for match in _TOOL_CALL.finditer(solution_str))


def final_answer(solution_str: str) -> str | None:
    """The last ``#### <integer>`` after the last ``</tool_call>`` (``None`` if there is none)."""
    last_call_end = solution_str.rfind("</tool_call>")
    tail = solution_str if last_call_end < 0 else solution_str[last_call_end:]
    answers = _FINAL_ANSWER.findall(tail)
    return answers[-1] if answers else None


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict:
    """``{"score", "acc", "tool_call"}`` for one response (see the module docstring)."""
    answer = final_answer(solution_str)
    correct = answer is not None and int(answer) == int(str(ground_truth).strip())
    acc = 1.0 if correct else 0.0
    return {"score": acc, "acc": acc, "tool_call": 1.0 if has_wellformed_tool_call(solution_str) else 0.0}
