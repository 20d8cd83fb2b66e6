"""Curves of a run of calculator_agent.py from the ``file`` logger's JSONL, as one PNG, plus a first/last table.

    python examples/agents_in_your_code/plot.py --metrics outputs/agents_in_your_code/metrics/openai_agent_seed0.jsonl \
        --out examples/agents_in_your_code/curves.png

Left: the reward the agent returned, per training step (``critic/score/mean`` over the step's rollouts) and on
the held-out questions (``val-core/agent_calculator/reward/mean@1``, one sample each at T=1). Right: completions
per trajectory (``agent_loop/completions/mean``: 1 = answered directly, 2 = called the calculator then answered).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TRAIN_REWARD = "critic/score/mean"
VAL_REWARD_PREFIX = "val-core/agent_calculator/"
COMPLETIONS = "agent_loop/completions"


def read_metrics(path: str | Path) -> dict[int, dict[str, float]]:
    """``step -> {metric: value}`` from the JSONL (later lines of a step are merged into it)."""
    steps: dict[int, dict[str, float]] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            steps.setdefault(int(row["step"]), {}).update(row["data"])
    if not steps:
        raise ValueError(f"{path} holds no metrics (did run_cpu.sh finish a step?)")
    return steps


def curve(steps: dict[int, dict[str, float]], key: str) -> list[tuple[int, float]]:
    """``[(step, value)]`` of the steps that logged ``key``; a key without ``/mean`` etc. also matches ``key/mean``."""
    points = []
    for step in sorted(steps):
        row = steps[step]
        value = row.get(key, row.get(f"{key}/mean"))
        if value is not None:
            points.append((step, float(value)))
    return points


def val_reward_key(steps: dict[int, dict[str, float]]) -> str | None:
    """The validation reward metric (``val-core/agent_calculator/<name>/mean@1``), if validation ran."""
    keys = sorted({k for row in steps.values() for k in row if k.startswith(VAL_REWARD_PREFIX) and "/mean@" in k})
    return keys[0] if keys else None


def summary(steps: dict[int, dict[str, float]], first_last: int = 3) -> dict[str, float]:
    """Mean train reward of the first and last ``first_last`` steps, validation first/last, completions first/last."""
    rewards = [v for _, v in curve(steps, TRAIN_REWARD)]
    completions = [v for _, v in curve(steps, COMPLETIONS)]
    table = {
        "steps": len(rewards),
        f"train_reward_first{first_last}": sum(rewards[:first_last]) / len(rewards[:first_last]),
        f"train_reward_last{first_last}": sum(rewards[-first_last:]) / len(rewards[-first_last:]),
        "completions_first": completions[0], "completions_last": completions[-1],
    }
    key = val_reward_key(steps)
    if key:
        val = curve(steps, key)
        table.update({"val_key": key, "val_first_step": val[0][0], "val_first": val[0][1],
                      "val_last_step": val[-1][0], "val_last": val[-1][1]})
    return table


def plot(steps: dict[int, dict[str, float]], out: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_reward, ax_calls) = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    ax_reward.plot(*zip(*curve(steps, TRAIN_REWARD)), "-", color="C0", label="train (critic/score/mean)")
    key = val_reward_key(steps)
    if key:
        ax_reward.plot(*zip(*curve(steps, key)), "--o", color="C1", markersize=4, label=f"held-out ({key})")
    ax_calls.plot(*zip(*curve(steps, COMPLETIONS)), "-", color="C2", label="agent_loop/completions (mean)")
    ax_reward.set_title("reward returned by calculator_agent.rollout")
    ax_reward.set_ylim(-0.02, 1.02)
    ax_calls.set_title("completions per trajectory (2 = used the calculator)")
    ax_calls.set_ylim(0.9, 3.1)
    for ax in (ax_reward, ax_calls):
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metrics", required=True, help="the run's JSONL (run_cpu.sh: <work_dir>/metrics/<NAME>.jsonl)")
    parser.add_argument("--out", default="curves.png")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    steps = read_metrics(args.metrics)
    plot(steps, Path(args.out), args.title)
    print(json.dumps(summary(steps), indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
