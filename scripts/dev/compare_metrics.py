"""Compare two runs' metric logs (the ``*.jsonl`` the file logger writes) step by step, timings aside.

A refactor that must not change behaviour runs the same seeded command before and after and expects every
non-timing metric of every step to be equal to the bit::

    python scripts/dev/compare_metrics.py BEFORE.jsonl AFTER.jsonl

Prints the validation metrics of both runs and the count of equal / different values; exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import sys

# wall-clock and memory readings differ run to run by nature
VOLATILE = ("timing", "perf/", "throughput", "weight_sync_s", "memory")


def read_steps(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def compare(before: list[dict], after: list[dict]) -> tuple[int, list[str]]:
    """(number of equal values, one line per difference) over the non-volatile metrics of each step."""
    equal, differences = 0, []
    if len(before) != len(after):
        differences.append(f"step count differs: {len(before)} vs {len(after)}")
    for row_before, row_after in zip(before, after):
        step = row_before.get("step")
        metrics_before, metrics_after = row_before.get("data", row_before), row_after.get("data", row_after)
        for key, value in metrics_before.items():
            if any(token in key for token in VOLATILE):
                continue
            if metrics_after.get(key) == value:
                equal += 1
            else:
                differences.append(f"step {step} {key}: {value!r} vs {metrics_after.get(key)!r}")
    return equal, differences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    args = parser.parse_args()
    before, after = read_steps(args.before), read_steps(args.after)
    for row_before, row_after in zip(before, after):
        for key, value in row_before.get("data", row_before).items():
            if key.startswith("val-core"):
                print(f"step {row_before.get('step')} {key}: {value} vs {row_after.get('data', row_after).get(key)}")
    equal, differences = compare(before, after)
    print("\n".join(differences[:50]))
    print(f"non-timing metrics equal: {equal}, different: {len(differences)}")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
