"""Benchmark figures: medians over repeats, ratios, FLOP/MFU arithmetic, target
checks, markdown tables and JSON output. No torch at import time (the fast tests import this module).

Conventions:
    - a *summary* of repeats is ``{"median", "min", "max", "repeats"}`` in the unit of the samples;
    - a *ratio* is ``value / peer`` (``None`` when either side is missing or the peer is 0);
    - training FLOPs follow the usual ``6 × parameters × tokens`` (forward 2, backward 4 per parameter
      and token); attention's sequence-length term and the LM head skipped by ``logits_to_keep`` are
      ignored, so MFU is an approximation, comparable across layouts of the same model.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def median(values: Iterable[float]) -> float:
    """Median of a non-empty sequence of numbers."""
    values = list(values)
    if not values:
        raise ValueError("median of an empty list: run at least one repeat (--repeats >= 1).")
    return float(statistics.median(values))


def summarize(samples: Sequence[float], warmup: int = 0) -> dict[str, float]:
    """``{median, min, max, repeats}`` of ``samples`` after dropping the first ``warmup`` ones."""
    if warmup < 0:
        raise ValueError(f"warmup={warmup} must be >= 0")
    kept = list(samples)[warmup:]
    if not kept:
        raise ValueError(f"{len(samples)} samples with warmup={warmup} leave nothing to summarize.")
    return {"median": median(kept), "min": float(min(kept)), "max": float(max(kept)), "repeats": len(kept)}


def time_calls(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Seconds of ``warmup + repeats`` calls of ``fn``; the warm-up calls are dropped from the result."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats} must be >= 1")
    seconds = []
    for _ in range(warmup + repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return seconds[warmup:]


LENGTH_DISTRIBUTIONS = ("uniform", "longtail")


def sample_lengths(
    count: int, max_len: int, min_len: int, full_share: float = 0.0, seed: int = 0, dist: str = "uniform"
) -> list[int]:
    """Lengths of ``count`` sequences: a ``full_share`` of them exactly ``max_len`` (responses cut at the
    limit), the rest drawn by ``dist`` (prompts of different lengths, responses ending at different EOS
    positions). Deterministic for a given ``seed``.

    ``uniform``: uniform in ``[min_len, max_len]``. ``longtail``: ``min_len`` plus an exponential of mean
    ``(max_len - min_len) / 4``, rounded and capped at ``max_len``: most responses short, a few long, as RL
    responses are when ``max_response_length`` is set to hold the long ones.
    """
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if not 0.0 <= full_share <= 1.0:
        raise ValueError(f"full_share={full_share} must be in [0, 1]")
    if dist not in LENGTH_DISTRIBUTIONS:
        raise ValueError(f"dist={dist!r}: choose from {LENGTH_DISTRIBUTIONS}")
    rng = random.Random(seed)

    def draw() -> int:
        if dist == "uniform":
            return rng.randint(min_len, max_len)
        mean = (max_len - min_len) / 4
        return min(max_len, min_len + round(rng.expovariate(1 / mean))) if mean > 0 else min_len

    return [max_len if rng.random() < full_share else draw() for _ in range(count)]


def ratio(value: float | None, peer: float | None) -> float | None:
    """``value / peer``, or ``None`` when either is missing or the peer is 0."""
    if value is None or peer is None or peer == 0:
        return None
    return float(value) / float(peer)


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of ``[m, k] @ [k, n]`` (a multiply and an add per term)."""
    return 2 * m * n * k


def training_flops(params: int, tokens: int) -> float:
    """Useful training FLOPs of one forward+backward over ``tokens`` tokens: ``6 × params × tokens``."""
    return 6.0 * params * tokens


def mfu(
    params: int, tokens: int, seconds: float, peak_flops_per_s: float, flops_per_param_token: float = 6.0
) -> float | None:
    """Model FLOPs utilisation: ``flops_per_param_token × params × tokens / seconds / peak``.

    ``flops_per_param_token`` is 6 for training (forward + backward), 2 for a forward only (log-probs).
    ``None`` without a positive time or peak.
    """
    if seconds <= 0 or not peak_flops_per_s:
        return None
    return flops_per_param_token * params * tokens / seconds / peak_flops_per_s


def target_check(value: float | None, target: float, higher_is_better: bool = True) -> dict[str, Any]:
    """Compare a figure with its target.

    Returns:
        ``{"target", "met", "of_target"}``: ``of_target`` is ``value / target`` when higher is better and
        ``target / value`` otherwise, so ``>= 1`` always means the target is met (``None`` when unmeasured).
    """
    if value is None:
        return {"target": target, "met": None, "of_target": None}
    of_target = ratio(value, target) if higher_is_better else ratio(target, value)
    return {"target": target, "met": of_target is not None and of_target >= 1.0, "of_target": of_target}


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: numbers with ``digits`` significant digits, ``None`` as ``–``."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None) -> str:
    """A GitHub markdown table of ``rows`` (dicts) over ``columns``; missing cells print as ``–``."""
    headers = list(headers or columns)
    if len(headers) != len(columns):
        raise ValueError(f"{len(headers)} headers for {len(columns)} columns")
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [fmt(row.get(column)).replace("|", "\\|") for column in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def emit_json(result: dict[str, Any], out: str | None) -> None:
    """Write ``result`` to ``out`` (if given) and always to stdout, as indented JSON."""
    text = json.dumps(result, indent=1, default=str)
    if out:
        with open(out, "w") as fp:
            fp.write(text + "\n")
    print(text)


def log(message: str) -> None:
    """Progress line on stderr (stdout carries the JSON)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def headline(
    benchmark: str,
    figure: str,
    value: float | None,
    unit: str,
    peer: str | None = None,
    peer_value: float | None = None,
    target: float | None = None,
    target_on: str = "ratio",
    higher_is_better: bool = True,
    note: str = "",
) -> dict[str, Any]:
    """One row of the summary table: a figure, its peer measured in the same run, their ratio and the
    issue's target, checked on the ``ratio`` (``target_on="ratio"``) or on the ``value`` itself."""
    if target_on not in ("ratio", "value"):
        raise ValueError(f"target_on={target_on!r} must be 'ratio' or 'value'")
    row: dict[str, Any] = {
        "benchmark": benchmark,
        "figure": figure,
        "value": value,
        "unit": unit,
        "peer": peer,
        "peer_value": peer_value,
        "ratio": ratio(value, peer_value),
        "note": note,
    }
    if target is not None:
        checked = row["ratio"] if target_on == "ratio" else value
        check = target_check(checked, target, higher_is_better)
        sign = ">=" if higher_is_better else "<="
        row.update(target=f"{target_on} {sign} {target:g}", met=check["met"], of_target=check["of_target"])
    return row
