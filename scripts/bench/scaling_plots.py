"""PNG plots of ``bench_scaling.py``'s curves: per sweep, s/step per stage (log-log) and peak RSS per worker.

hybridrl draws solid lines, TRL dashed ones; one colour per stage (the step total in black); each legend
entry carries its fitted log-log slope. Without matplotlib nothing is drawn and a message says how to get it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from figures import log

COLORS = {"step": "black", "gen": "tab:blue", "update": "tab:red", "old_log_prob": "tab:purple",
          "ref": "tab:brown", "other": "tab:gray"}
STYLES = {"hybridrl": "-", "trl": "--"}
MARKERS = {"hybridrl": "o", "trl": "s"}
LABELS = {"hybridrl": "hybridrl", "trl": "TRL"}


def _slope_text(f: dict[str, Any]) -> str:
    return "" if f.get("slope") is None else f" (slope {f['slope']:.2f})"


def _x_ticks(ax: Any, fits: dict[str, Any]) -> None:
    """Ticks at the measured x values, written plainly (16, 64, 256 rather than powers of ten)."""
    from matplotlib.ticker import NullLocator

    xs = sorted({x for stages in fits.values() for f in stages.values() for x in f["x"]})
    if xs:
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(xs, [str(x) for x in xs])


def _time_panel(ax: Any, fits: dict[str, Any], xlabel: str) -> None:
    for side, stages in fits.items():
        for stage, f in stages.items():
            if stage == "peak_rss_gb" or not f["x"] or max(f["y"]) <= 0:
                continue
            ax.plot(f["x"], f["y"], STYLES[side], marker=MARKERS[side], color=COLORS.get(stage, "tab:green"),
                    label=f"{LABELS[side]} {stage}{_slope_text(f)}")
    ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel="seconds per step (median)", title="s/step by stage")
    _x_ticks(ax, fits)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _memory_panel(ax: Any, fits: dict[str, Any], xlabel: str) -> None:
    for side, stages in fits.items():
        f = stages["peak_rss_gb"]
        if f["x"]:
            ax.plot(f["x"], f["y"], STYLES[side], marker=MARKERS[side], color="tab:orange" if side == "trl" else "tab:green",
                    label=f"{LABELS[side]} worker{_slope_text(f)}")
    ax.set(xscale="log", xlabel=xlabel, ylabel="peak RSS (GiB)", title="peak memory per worker process")
    peaks = [y for stages in fits.values() for y in stages["peak_rss_gb"]["y"]]
    ax.set_ylim(0, 1.15 * max(peaks, default=1.0))
    _x_ticks(ax, fits)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def plot_sweeps(records: list[dict], fits: dict[str, Any], sweeps: dict[str, str], plot_dir: Path,
                title: str) -> dict[str, str]:
    """``{sweep: png path}`` for every sweep with at least one point; ``{}`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed: no plots (pip install matplotlib; the JSON has the curves)")
        return {}
    plot_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for sweep, xlabel in sweeps.items():
        if not any(sweep in r["sweeps"] for r in records):
            continue
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
        _time_panel(left, fits[sweep], xlabel)
        _memory_panel(right, fits[sweep], xlabel)
        fixed = "n" if sweep == "response_length" else "response_length"
        values = sorted({r[fixed] for r in records if sweep in r["sweeps"]})
        fig.suptitle(f"GRPO scaling with {xlabel}: {title}, {fixed}={values[0] if len(values) == 1 else values}")
        fig.tight_layout()
        path = plot_dir / f"scaling_{'group_size' if sweep == 'n' else sweep}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths[sweep] = str(path)
    return paths
