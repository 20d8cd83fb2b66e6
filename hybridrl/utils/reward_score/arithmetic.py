"""Scorer for hybridrl's synthetic arithmetic task (``data_source == "arithmetic"``).

The model is asked for the value of an integer expression; the last integer in its completion is its
answer. 1.0 if that integer equals the ground truth, else 0.0 (also 0.0 when there is no integer).
"""

from __future__ import annotations

import re

_INTEGER = re.compile(r"-?\d+")


def extract_answer(solution_str: str) -> int | None:
    """The last integer (optionally negative) in ``solution_str``; commas between digits are ignored."""
    matches = _INTEGER.findall(re.sub(r"(?<=\d),(?=\d{3})", "", solution_str))
    return int(matches[-1]) if matches else None


def compute_score(solution_str: str, ground_truth: str | int) -> float:
    """1.0 if the last integer of ``solution_str`` equals ``int(ground_truth)``, else 0.0."""
    answer = extract_answer(solution_str)
    try:
        target = int(str(ground_truth).strip())
    except ValueError as exc:
        raise ValueError(f"arithmetic ground_truth must be an integer string, got {ground_truth!r}") from exc
    return 1.0 if answer is not None and answer == target else 0.0
