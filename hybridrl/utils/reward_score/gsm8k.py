"""GSM8K scorer, verl 0.5 rules (ReFT: Trung et al., ACL 2024).

Only the last 300 characters of the response are searched (answers come last; long regex scans are slow).

- ``strict``:   the last ``#### <number>`` (regex ``#### (\\-?[0-9\\.\\,]+)``), with ``,`` and ``$`` removed.
- ``flexible``: the last number-like run ``-?[0-9.,]+`` that is not ``""`` or ``"."``, kept as written
  (verl does not strip commas in this mode).

Score: no answer → 0; ``answer == ground_truth`` (string equality) → ``score`` (1.0); else ``format_score`` (0.0).
A trailing period is part of the match (``#### 72.`` → ``"72."``), exactly as in verl.
"""

from __future__ import annotations

import re

_SOLUTION_CLIP_CHARS = 300
_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(\-?[0-9\.\,]+)")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """Return the answer string the model gave, or None when there is none."""
    assert method in ("strict", "flexible"), f"method must be 'strict' or 'flexible', got {method!r}"
    if len(solution_str) > _SOLUTION_CLIP_CHARS:
        solution_str = solution_str[-_SOLUTION_CLIP_CHARS:]
    if method == "strict":
        matches = _STRICT.findall(solution_str)
        return matches[-1].replace(",", "").replace("$", "") if matches else None
    candidates = _FLEXIBLE.findall(solution_str)
    final_answer = None
    for final_answer in reversed(candidates):  # noqa: B007 - verl keeps the last value tried
        if final_answer not in ("", "."):
            break
    return final_answer


def compute_score(
    solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """``score`` if the extracted answer equals ``ground_truth``, ``format_score`` if wrong, 0 if absent."""
    answer = extract_solution(solution_str=solution_str, method=method)
    if answer is None:
        return 0
    return score if answer == ground_truth else format_score
