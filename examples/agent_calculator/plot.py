"""Curves of the calculator-agent runs from their TensorBoard event files, as one PNG.

    python examples/agent_calculator/plot.py --tb_dir outputs/agent_calculator/tensorboard \
        --runs grpo_seed0 grpo_seed1 --baseline no_tool_seed0 --out examples/agent_calculator/curves.png

Left: the task reward, per training step (``critic/score/mean``, 128 rollouts) and on the held-out questions
(``val-core/agent_calculator/acc/mean@1``, 128 samples at T=1). Right: the tool-call rate, per training step
(``agent_loop/tool_call_rate``: rollouts whose model made at least one call the tool ran) and on the held-out
questions (``val-aux/agent_calculator/tool_call/mean@1``: the reward function's well-formed-call check). A
``--baseline`` run (no tools) is drawn as a horizontal line at its validation reward. Also prints a table of
the first and last values of each run (``--summary`` writes it as JSON).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TRAIN_REWARD = "critic/score/mean"
VAL_REWARD = "val-core/agent_calculator/acc/mean@1"
TRAIN_TOOL_RATE = "agent_loop/tool_call_rate"
VAL_TOOL_RATE = "val-aux/agent_calculator/tool_call/mean@1"
CURVES = (TRAIN_REWARD, VAL_REWARD, TRAIN_TOOL_RATE, VAL_TOOL_RATE)


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """``tag -> [(step, value), ...]`` (sorted by step; the last write of a step wins) of every event file."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(run_dir.glob("events.out.tfevents.*"))
    if not files:
        raise FileNotFoundError(f"no TensorBoard event files in {run_dir} (run run_cpu.sh first)")
    scalars: dict[str, dict[int, float]] = {}
    for path in files:
        accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            for event in accumulator.Scalars(tag):
                scalars.setdefault(tag, {})[int(event.step)] = float(event.value)
    return {tag: sorted(points.items()) for tag, points in scalars.items()}


def first_last(scalars: dict[str, list[tuple[int, float]]]) -> dict[str, dict[str, float]]:
    """``tag -> {"first", "last", "first_step", "last_step"}`` for the plotted tags that exist."""
    table = {}
    for tag in CURVES:
        points = scalars.get(tag)
        if points:
            table[tag] = {"first_step": points[0][0], "first": points[0][1], "last_step": points[-1][0], "last": points[-1][1]}
    return table


def plot(runs: dict[str, dict], baseline: dict | None, out: Path) -> None:
    """Two panels (reward, tool-call rate); one colour per run, solid = training, dashed = validation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_reward, ax_tool) = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for index, (name, scalars) in enumerate(runs.items()):
        color = f"C{index}"
        for ax, train_tag, val_tag in ((ax_reward, TRAIN_REWARD, VAL_REWARD), (ax_tool, TRAIN_TOOL_RATE, VAL_TOOL_RATE)):
            for tag, style, label in ((train_tag, "-", f"{name} train"), (val_tag, "--o", f"{name} val")):
                points = scalars.get(tag, [])
                if points:
                    ax.plot(*zip(*points), style, color=color, label=label, markersize=3, alpha=0.9)
    if baseline is not None and baseline.get(VAL_REWARD):
        value = baseline[VAL_REWARD][-1][1]
        ax_reward.axhline(value, color="gray", linestyle=":", label=f"no-tool baseline (val) {value:.2f}")
    for ax, title in ((ax_reward, "task reward (exact product)"), (ax_tool, "tool-call rate")):
        ax.set_title(title)
        ax.set_xlabel("GRPO step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tb_dir", required=True, help="folder holding one sub-folder of event files per run")
    parser.add_argument("--runs", nargs="+", required=True, help="run (sub-folder) names to draw")
    parser.add_argument("--baseline", default=None, help="the no-tool run's sub-folder")
    parser.add_argument("--out", default="curves.png")
    parser.add_argument("--summary", default=None, help="write the first/last table here as JSON")
    args = parser.parse_args(argv)
    tb_dir = Path(args.tb_dir).expanduser()
    runs = {name: read_scalars(tb_dir / name) for name in args.runs}
    baseline = read_scalars(tb_dir / args.baseline) if args.baseline else None
    plot(runs, baseline, Path(args.out))
    summary = {name: first_last(scalars) for name, scalars in runs.items()}
    if baseline is not None:
        summary[args.baseline] = first_last(baseline)
    print(json.dumps(summary, indent=2))
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
