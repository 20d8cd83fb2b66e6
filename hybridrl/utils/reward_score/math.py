"""MATH scorer (verl 0.5 ``reward_score/math.py``, from EleutherAI's lm-evaluation-harness hendrycks_math).

The answer is the content of the last ``\\boxed{...}`` (nested braces balanced) or ``\\boxed x``;
both sides go through :func:`strip_string` and are compared as strings. 1.0 if equal, else 0.0.

Faithful quirks kept on purpose (scores must match verl's):
- ``\\fbox{...}`` is *found* by :func:`last_boxed_only_string` but :func:`remove_boxed` only accepts
  ``\\boxed``, so an ``\\fbox`` answer scores 0.0, as in verl.
- when normalisation itself fails (e.g. ``\\sqrt`` at the very end), :func:`is_equiv` falls back to
  comparing the raw strings.
"""

from __future__ import annotations


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 if the last boxed answer is equivalent to ``ground_truth`` after normalisation, else 0.0."""
    retval = 0.0
    try:
        boxed = last_boxed_only_string(solution_str)
        if boxed is not None and is_equiv(remove_boxed(boxed), ground_truth):
            retval = 1.0
    except Exception as exc:  # verl prints and scores 0
        print(exc)
    return retval


def is_equiv(str1: str | None, str2: str | None, verbose: bool = False) -> bool:
    """Equal after :func:`strip_string` (raw equality if normalising raises)."""
    if str1 is None and str2 is None:
        print("WARNING: Both None")
        return True
    if str1 is None or str2 is None:
        return False
    try:
        ss1, ss2 = strip_string(str1), strip_string(str2)
        if verbose:
            print(ss1, ss2)
        return ss1 == ss2
    except Exception:
        return str1 == str2


def remove_boxed(s: str) -> str:
    """``\\boxed{x}`` → ``x``; ``\\boxed x`` → ``x``. Asserts the wrapper is there."""
    if "\\boxed " in s:
        left = "\\boxed "
        assert s[: len(left)] == left
        return s[len(left) :]
    left = "\\boxed{"
    assert s[: len(left)] == left
    assert s[-1] == "}"
    return s[len(left) : -1]


def last_boxed_only_string(string: str) -> str | None:
    """The last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, ``\\boxed x`` up to ``$``, or None."""
    if "\\boxed " in string:
        return "\\boxed " + string.split("\\boxed ")[-1].split("$")[0]
    idx = string.rfind("\\boxed")
    if idx < 0:
        idx = string.rfind("\\fbox")
        if idx < 0:
            return None
    depth = 0
    for i in range(idx, len(string)):
        if string[i] == "{":
            depth += 1
        elif string[i] == "}":
            depth -= 1
            if depth == 0:
                return string[idx : i + 1]
    return None


def _fix_fracs(string: str) -> str:
    """``\\frac12`` → ``\\frac{1}{2}``, ``\\frac1{72}`` → ``\\frac{1}{72}``."""
    pieces = string.split("\\frac")
    out = pieces[0]
    for piece in pieces[1:]:
        out += "\\frac"
        if piece[0] == "{":  # IndexError on an empty piece, caught by is_equiv as in verl
            out += piece
            continue
        if len(piece) < 2:
            return string
        a, b, rest = piece[0], piece[1], piece[2:]
        out += "{" + a + "}{" + b + "}" + rest if b != "{" else "{" + a + "}" + b + rest
    return out


def _fix_a_slash_b(string: str) -> str:
    """``3/4`` → ``\\frac{3}{4}`` when both sides are plain integers."""
    parts = string.split("/")
    if len(parts) != 2:
        return string
    try:
        a, b = int(parts[0]), int(parts[1])
        assert string == f"{a}/{b}"
        return "\\frac{" + str(a) + "}{" + str(b) + "}"
    except Exception:
        return string


def _remove_right_units(string: str) -> str:
    """Drop a trailing ``\\text{ unit}`` (asserts there is at most one)."""
    if "\\text{ " in string:
        splits = string.split("\\text{ ")
        assert len(splits) == 2
        return splits[0]
    return string


def _fix_sqrt(string: str) -> str:
    """``\\sqrt3`` → ``\\sqrt{3}``."""
    if "\\sqrt" not in string:
        return string
    splits = string.split("\\sqrt")
    out = splits[0]
    for split in splits[1:]:
        out += "\\sqrt{" + split[0] + "}" + split[1:] if split[0] != "{" else "\\sqrt" + split
    return out


def strip_string(string: str) -> str:
    """Normalise a LaTeX answer (spaces, ``\\left``/``\\right``, units, ``%``, fractions, sqrt, ``k=``)."""
    for old, new in (
        ("\n", ""),
        ("\\!", ""),
        ("\\\\", "\\"),
        ("tfrac", "frac"),
        ("dfrac", "frac"),
        ("\\left", ""),
        ("\\right", ""),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
        ("\\$", ""),
    ):
        string = string.replace(old, new)
    string = _remove_right_units(string)
    string = string.replace("\\\\%", "").replace("\\%", "")
    string = string.replace(" .", " 0.").replace("{.", "{0.")
    if len(string) == 0:
        return string
    if string[0] == ".":
        string = "0" + string
    if len(string.split("=")) == 2 and len(string.split("=")[0]) <= 2:
        string = string.split("=")[1]
    string = _fix_sqrt(string)
    string = string.replace(" ", "")
    string = _fix_fracs(string)
    if string == "0.5":
        string = "\\frac{1}{2}"
    return _fix_a_slash_b(string)


# Kept for code that imports the verl helper names.
fix_fracs, fix_a_slash_b, fix_sqrt, remove_right_units = _fix_fracs, _fix_a_slash_b, _fix_sqrt, _remove_right_units
