"""Summarize a quickstart run from the ``file`` logger's JSONL: accuracy before/after, time to a target, PNG curve.

Reads the metrics ``main_ppo`` wrote with ``trainer.logger=[...,file]`` (one JSON object per line:
``{"step": int, "data": {name: value}}``) and reports:

- greedy validation accuracy (``val-core/arithmetic/reward/mean@1``) before training (step 0) and at the end;
- minutes of *training* (the sum of ``timing_s/step`` minus ``timing_s/testing``/``save_checkpoint``) until validation first reached
  ``--target`` (TRL's 72.7%), or "not reached";
- a 95% interval for the final greedy accuracy (Wilson score interval on k correct of the ``--num_val`` problems):
  what the accuracy on another sample of the same task may be, e.g. 104/128 = 81.2% -> [73.6%, 87.1%];
- a PNG with the mean training reward per step and the validation accuracy;
- with ``--json``, the same figures as a JSON object.

Example: python examples/quickstart/summarize.py outputs/quickstart/smollm2_grpo_seed1.jsonl --png curve.png
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

VAL_KEY = "val-core/arithmetic/reward/mean@1"
REWARD_KEY = "critic/score/mean"
STEP_TIME_KEY = "timing_s/step"
EXCLUDED_TIME_KEYS = ("timing_s/testing", "timing_s/save_checkpoint")
Z_95 = 1.959963984540054  # the standard normal's 97.5% quantile: a two-sided 95% interval


@dataclass
class RunCurves:
    """Per-step series of one run (steps are the trainer's global steps; validation step 0 = before training)."""

    val: dict[int, float] = field(default_factory=dict)
    reward: dict[int, float] = field(default_factory=dict)
    step_time_s: dict[int, float] = field(default_factory=dict)

    def train_minutes_until(self, step: int) -> float:
        """Training time of steps ``1..step`` in minutes (validation time excluded)."""
        return sum(t for s, t in self.step_time_s.items() if s <= step) / 60.0

    def first_step_reaching(self, target: float) -> int | None:
        """First validated step with accuracy ≥ ``target`` (step 0 counts: a model may start there)."""
        return next((s for s in sorted(self.val) if self.val[s] >= target), None)


def read_curves(path: str | Path) -> RunCurves:
    """Parse the JSONL metrics file; later lines for the same step override earlier ones."""
    curves = RunCurves()
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        step, data = int(row["step"]), row["data"]
        if VAL_KEY in data:
            curves.val[step] = float(data[VAL_KEY])
        if REWARD_KEY in data:
            curves.reward[step] = float(data[REWARD_KEY])
        if STEP_TIME_KEY in data:  # verl's step timer also covers validation and checkpointing: take them out
            excluded = sum(float(data.get(k, 0.0)) for k in EXCLUDED_TIME_KEYS)
            curves.step_time_s[step] = float(data[STEP_TIME_KEY]) - excluded
    if not curves.val:
        raise ValueError(f"{path} has no {VAL_KEY!r}: was the run started with trainer.val_before_train=True "
                         "and trainer.logger including 'file' on the arithmetic data?")
    return curves


def wilson_interval(correct: int, total: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``correct / total``.

    With p = k/n:  center = (p + z²/2n) / (1 + z²/n),  half = z / (1 + z²/n) · sqrt(p(1−p)/n + z²/4n²).
    Unlike p ± z·sqrt(p(1−p)/n) it stays inside [0, 1] and does not collapse to a point at k = 0 or k = n.
    """
    if total <= 0 or not 0 <= correct <= total:
        raise ValueError(f"need 0 <= correct <= total and total > 0, got {correct} of {total}")
    p, z2 = correct / total, z * z
    scale = 1 + z2 / total
    center = (p + z2 / (2 * total)) / scale
    half = z / scale * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total))
    return max(0.0, center - half), min(1.0, center + half)


def correct_count(accuracy: float, num_val: int) -> int:
    """k with k / num_val == accuracy; a ValueError when no whole k fits (``--num_val`` is not the set's size)."""
    correct = round(accuracy * num_val)
    if abs(correct - accuracy * num_val) > 1e-3:
        raise ValueError(f"accuracy {accuracy} is not k/{num_val} for a whole k: pass --num_val with the size of "
                         "the validation set (make_data.py --test_size)")
    return correct


def final_interval(curves: RunCurves, num_val: int) -> dict[str, float]:
    """The last validation's ``correct``, ``num_val`` and its 95% Wilson interval ``ci95_low`` / ``ci95_high``."""
    correct = correct_count(curves.val[max(curves.val)], num_val)
    low, high = wilson_interval(correct, num_val)
    return {"correct": correct, "num_val": num_val, "ci95_low": low, "ci95_high": high}


def summary_dict(curves: RunCurves, target: float, num_val: int | None = None,
                 total_wall_s: float | None = None) -> dict[str, object]:
    """The summary's figures (the ``--json`` output); the interval when ``num_val`` is given."""
    steps = sorted(curves.val)
    hit = curves.first_step_reaching(target)
    summary: dict[str, object] = {
        "val_key": VAL_KEY, "accuracy_before": curves.val[steps[0]], "accuracy_after": curves.val[steps[-1]],
        "accuracy_best": max(curves.val.values()), "last_step": steps[-1],
        "train_minutes": curves.train_minutes_until(steps[-1]), "target": target, "target_step": hit,
        "target_train_minutes": None if hit is None else curves.train_minutes_until(hit),
        "total_wall_s": total_wall_s,
    }  # fmt: skip
    if num_val is not None:
        summary.update(final_interval(curves, num_val))
    return summary


def summary_lines(
    curves: RunCurves, target: float, total_wall_s: float | None = None, num_val: int | None = None
) -> list[str]:
    steps = sorted(curves.val)
    first, last = steps[0], steps[-1]
    lines = [
        f"validation accuracy (greedy, {VAL_KEY}): before {curves.val[first]:.1%} (step {first}) "
        f"-> after {curves.val[last]:.1%} (step {last}); best {max(curves.val.values()):.1%}",
        f"training time: {curves.train_minutes_until(last):.2f} min for {len(curves.step_time_s)} steps "
        "(validation excluded)",
    ]
    hit = curves.first_step_reaching(target)
    if hit is None:
        lines.append(f"target {target:.1%}: not reached")
    else:
        lines.append(f"target {target:.1%}: reached at step {hit} after {curves.train_minutes_until(hit):.2f} min "
                     "of training")
    if total_wall_s is not None:
        lines.append(f"total wall time (set-up + training + validation): {total_wall_s / 60:.2f} min")
    if num_val is not None:
        found = final_interval(curves, num_val)
        lines.append(f"final greedy accuracy {found['correct']}/{num_val} = {found['correct'] / num_val:.1%}, "
                     f"95% interval [{found['ci95_low']:.1%}, {found['ci95_high']:.1%}] (Wilson score)")
    return lines


def plot(curves: RunCurves, png: str | Path, target: float) -> None:
    """Training reward (mean per step) and validation accuracy vs step, with the target line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    if curves.reward:
        xs = sorted(curves.reward)
        ax.plot(xs, [curves.reward[s] for s in xs], label="train reward (mean of samples)", alpha=0.6)
    xs = sorted(curves.val)
    ax.plot(xs, [curves.val[s] for s in xs], marker="o", label="validation accuracy (greedy, 128 held out)")
    ax.axhline(target, linestyle="--", color="gray", label=f"TRL after 15 min: {target:.1%}")
    ax.set_xlabel("training step")
    ax.set_ylabel("accuracy / reward")
    ax.set_ylim(0, 1)
    ax.set_title("GRPO on SmolLM2-135M-Instruct: 2-digit addition (CPU)")
    ax.legend(loc="best")
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", help="the file logger's JSONL (VERL_FILE_LOGGER_PATH)")
    parser.add_argument("--png", default=None, help="write the curve here")
    parser.add_argument("--target", type=float, default=0.727)
    parser.add_argument("--total_wall_s", type=float, default=None)
    parser.add_argument("--num_val", type=int, default=128,
                        help="validation problems behind the accuracy (make_data.py --test_size), for the 95%% interval")
    parser.add_argument("--json", default=None, help="also write the summary's figures here as JSON")
    args = parser.parse_args(argv)
    curves = read_curves(args.metrics)
    for line in summary_lines(curves, args.target, args.total_wall_s, args.num_val):
        print(f"[quickstart] {line}", flush=True)
    if args.json:
        summary = summary_dict(curves, args.target, args.num_val, args.total_wall_s)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(summary, indent=1))
        print(f"[quickstart] summary: {args.json}", flush=True)
    if args.png:
        plot(curves, args.png, args.target)
        print(f"[quickstart] curve: {args.png}", flush=True)


if __name__ == "__main__":
    main()
