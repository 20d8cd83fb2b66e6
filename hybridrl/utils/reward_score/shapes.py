"""Shapes scorer (``examples/data_preprocess/shapes.py``): the colour of the one shape in the image.

The first colour word of the response counts (red, green, blue, yellow; case-insensitive, whole words):
- it is the ground truth → 1.0
- another colour comes first, or no colour word at all → 0.0
"""

from __future__ import annotations

import re

COLOUR_WORDS = ("red", "green", "blue", "yellow")
_COLOUR = re.compile(r"\b(" + "|".join(COLOUR_WORDS) + r")\b", re.IGNORECASE)


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 when the first colour word of ``solution_str`` is ``ground_truth``, else 0.0."""
    match = _COLOUR.search(solution_str)
    return float(match is not None and match.group(1).lower() == str(ground_truth).strip().lower())
