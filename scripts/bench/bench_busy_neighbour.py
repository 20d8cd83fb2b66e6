"""The quickstart's step time alone and beside one busy process, at two priorities of the Ray workers.

    python scripts/bench/bench_busy_neighbour.py [--steps 4] [--cases alone:0 busy:0 busy:15]

Each case runs ``examples/quickstart/run_quickstart.sh`` for ``--steps`` steps (SmolLM2-135M-Instruct, GRPO, the
quickstart's settings) with ``RAY_worker_niceness`` set to the case's value (hybridrl's local CPU cluster uses 0;
Ray's own default is 15). ``busy`` starts one process spinning on one core (nice 0, as a browser tab or an
indexer would) for the length of the run. Reported: the median ``timing_s/step`` of steps 2..N-1 (step 1 warms up,
step N also saves the model) per case, its ratio to the ``alone`` case, and the ratio a fair share of the CPU predicts: the run's threads
(``CORES`` torch threads in one worker) sharing the cores with one more busy thread. One JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPIN = "while True: pass"


def _step_times(metrics: Path) -> list[float]:
    times = []
    for line in metrics.read_text().splitlines():
        record = json.loads(line)
        data = record.get("data", record)
        if "timing_s/step" in data:
            times.append(float(data["timing_s/step"]))
    return times


def run_case(steps: int, niceness: int, busy: bool, out_dir: Path) -> dict:
    env = {
        **os.environ,
        "STEPS": str(steps),
        "TEST_FREQ": str(steps + 1),
        "OUT_DIR": str(out_dir),
        "RAY_worker_niceness": str(niceness),
        "EXPERIMENT": f"busy{int(busy)}_nice{niceness}",
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if busy else None
    try:
        subprocess.run(
            ["bash", str(ROOT / "examples/quickstart/run_quickstart.sh")],
            cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    times = _step_times(out_dir / f"{env['EXPERIMENT']}.jsonl")
    return {"step_s": [round(t, 2) for t in times], "median_step_s": round(statistics.median(times[1:-1]), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--cases", nargs="+", default=["alone:0", "busy:0", "busy:15"])
    args = parser.parse_args()
    if args.steps < 3:
        parser.error("--steps must be >= 3 (step 1 warms up, the last step also saves the model)")
    cores = os.cpu_count() or 1
    report: dict = {"cores": cores, "steps": args.steps, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            condition, niceness = case.split(":")
            result = run_case(args.steps, int(niceness), condition == "busy", Path(tmp) / case.replace(":", "_"))
            report["cases"][f"{condition}, worker niceness {niceness}"] = result
    medians = {name: case["median_step_s"] for name, case in report["cases"].items()}
    alone = next((value for name, value in medians.items() if name.startswith("alone")), None)
    if alone:
        report["slowdown_vs_alone"] = {name: round(value / alone, 2) for name, value in medians.items()}
        report["fair_share_slowdown"] = round((cores + 1) / cores, 2)  # CORES threads + 1 busy thread on CORES cores
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
