"""Summarize a quickstart run from the ``file`` logger's JSONL: accuracy before/after, time to a target, PNG curve.

Reads the metrics ``main_ppo`` wrote with ``trainer.logger=[...,file]`` (one JSON object per line:
``{"step": int, "data": {name: value}}``) and reports:

- greedy validation accuracy (``val-core/arithmetic/reward/mean@1``) before training (step 0) and at the end;
- minutes of *training* (the sum of ``timing_s/step`` minus ``timing_s/testing``/``save_checkpoint``) until validation first reached
  ``--target`` (TRL's 72.7%), or "not reached";
- a PNG with the mean training reward per step and the validation accuracy.

Example: python examples/quickstart/summarize.py outputs/quickstart/smollm2_grpo_seed1.jsonl --png curve.png
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

VAL_KEY = "val-core/arithmetic/reward/mean@1"
REWARD_KEY = "critic/score/mean"
STEP_TIME_KEY = "timing_s/step"
EXCLUDED_TIME_KEYS = ("timing_s/testing", "timing_s/save_checkpoint")


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


def summary_lines(curves: RunCurves, target: float, total_wall_s: float | None = None) -> list[str]:
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
    args = parser.parse_args(argv)
    curves = read_curves(args.metrics)
    for line in summary_lines(curves, args.target, args.total_wall_s):
        print(f"[quickstart] {line}", flush=True)
    if args.png:
        plot(curves, args.png, args.target)
        print(f"[quickstart] curve: {args.png}", flush=True)


if __name__ == "__main__":
    main()
