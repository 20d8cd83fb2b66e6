"""bench_scaling.py's pure parts: the sweep points, the stage split of each side, the log-log slopes and their
words, the peak-memory reader and the plots (no trainer runs: those are the benchmark itself)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_sweep_points_share_the_crossing_point_and_micro_divides_the_batch():
    from bench_scaling import micro_batch, sweep_points

    points = sweep_points([16, 64, 256], [4, 8, 16], base_n=8, base_length=64)
    assert [(p["response_length"], p["n"]) for p in points] == [(16, 8), (64, 8), (256, 8), (64, 4), (64, 16)]
    assert points[1]["sweeps"] == ["n", "response_length"]  # (64, 8) is on both curves, run once
    assert micro_batch(32, 64) == 32 and micro_batch(32, 16) == 16 and micro_batch(32, 12) == 4
    # a token cap halves it: 8 rows of 64 + 1024 slots exceed 8192, 4 rows fit; shorter rows keep all 8
    assert micro_batch(8, 8, 64 + 1024, 8192) == 4 and micro_batch(8, 8, 64 + 256, 8192) == 8
    assert micro_batch(8, 8, 10_000, 8192) == 1 and micro_batch(8, 8, 64 + 1024, 0) == 8


def test_stage_split_adds_up_to_the_step():
    from bench_scaling import hybrid_stages, trl_stages

    hybrid = {"step_s": {"median": 10.0},
              "stage_medians_s": {"gen": 3.0, "update_actor": 6.0, "old_log_prob": 0.5, "step": 10.2}}
    stages = hybrid_stages(hybrid)
    assert stages == {"gen": 3.0, "update": 6.0, "old_log_prob": 0.5, "other": pytest.approx(0.5), "step": 10.0}
    trl = {"step_s": {"median": 8.0}, "stage_medians_s": {"gen": 2.0, "gen_score": 2.5, "update": 5.5}}
    assert trl_stages(trl) == {"gen": 2.0, "update": 5.5, "other": 0.5, "step": 8.0}


def test_loglog_slopes_name_linear_and_quadratic_growth():
    from bench_scaling import growth_label, loglog_slope, slopes

    xs = [16, 64, 256, 1024]
    assert loglog_slope(xs, [2.0 * x for x in xs]) == pytest.approx(1.0)
    assert loglog_slope(xs, [0.1 * x * x for x in xs]) == pytest.approx(2.0)
    assert loglog_slope([16], [1.0]) is None and growth_label(None).startswith("unknown")
    assert growth_label(-1.0).startswith("decreasing")
    assert [growth_label(s) for s in (0.1, 0.5, 1.0, 1.5, 2.0, 3.0)] == [
        "flat (fixed cost dominates)", "sublinear", "linear", "between linear and quadratic", "quadratic",
        "superquadratic"]

    def side(r):
        return {"stages_s": {"gen": 0.01 * r, "update": 1e-4 * r * r, "step": 0.01 * r + 1e-4 * r * r},
                "worker_peak_rss_gb": 1.0 + 0.001 * r}

    records = [{"response_length": r, "n": 8, "sweeps": ["response_length"], "hybridrl": side(r), "trl": side(r)}
               for r in xs]
    fits = slopes(records)["response_length"]["hybridrl"]
    assert fits["gen"]["growth"] == "linear" and fits["update"]["growth"] == "quadratic"
    assert fits["peak_rss_gb"]["delta_growth"] == "linear"  # what the sequences add above the first point


def test_peak_memory_reads_the_high_water_mark_of_children():
    from peak_memory import PeakMemory, vm_hwm_bytes, worker_peak_gb

    if not os.path.exists(f"/proc/{os.getpid()}/status"):
        pytest.skip("no /proc on this system")
    assert vm_hwm_bytes(os.getpid()) > 0
    code = "import time; b = b'x' * (200 * 2**20); del b; time.sleep(1.0)  # bytes"  # 200 MiB peak, then freed
    with PeakMemory(interval_s=0.1) as memory:
        subprocess.run([sys.executable, "-c", code], check=True)
    rows = memory.processes()
    assert worker_peak_gb(rows, "# bytes") >= 0.19  # the peak survives the free
    assert worker_peak_gb(rows, "no such process") is None


def test_plots_are_written_per_sweep(tmp_path):
    pytest.importorskip("matplotlib")
    from bench_scaling import SWEEPS, slopes
    from scaling_plots import plot_sweeps

    def side(r, n):
        return {"stages_s": {"gen": 0.01 * r * n, "update": 0.02 * r * n, "other": 0.001, "step": 0.03 * r * n},
                "worker_peak_rss_gb": 0.5 + 0.01 * r}

    records = [{"response_length": r, "n": n, "sweeps": sweeps, "hybridrl": side(r, n), "trl": side(r, n)}
               for r, n, sweeps in ((16, 8, ["response_length"]), (64, 8, ["n", "response_length"]), (64, 4, ["n"]))]
    paths = plot_sweeps(records, slopes(records), SWEEPS, tmp_path, "test")
    assert set(paths) == {"response_length", "n"}
    assert all(os.path.getsize(path) > 1000 for path in paths.values())


def test_one_side_can_be_measured_alone():
    from bench_scaling import headlines, parse_args, slopes

    assert parse_args([]).sides == ("hybridrl", "trl")
    assert parse_args(["--sides", "hybridrl"]).sides == ("hybridrl",)
    with pytest.raises(SystemExit):
        parse_args(["--sides", "hybridrl,deepspeed"])
    side = {"stages_s": {"gen": 1.0, "step": 2.0}, "worker_peak_rss_gb": 1.0}
    records = [{"response_length": r, "n": 4, "samples_per_step": 8, "sweeps": ["response_length"], "hybridrl": side}
               for r in (16, 64)]
    assert set(slopes(records, ("hybridrl",))["response_length"]) == {"hybridrl"}
    assert [row["value"] for row in headlines(records)][:1] == [2.0]
