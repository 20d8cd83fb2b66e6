"""The actor update under each host allocator: wall time, page faults and kernel time, one run.

Each setting of ``HYBRIDRL_CPU_ALLOCATOR`` (``system``: glibc as installed; ``glibc``: the tuned glibc;
``jemalloc`` / ``tcmalloc``: preloaded when installed, skipped with a note otherwise) runs
``bench_train.py`` in its own process with the environment hybridrl's workers get, on the quickstart's update
shape by default (SmolLM2, 4 prompts × 8 samples, prompts ≤ 64, 16-token responses, micro-batch 16, shared
prompt). The child's minor page faults and user/system CPU seconds come from ``getrusage`` of the finished
process, so they include model loading (the same for every setting); the update median is bench_train's.

    python scripts/bench/bench_allocator.py --dtypes bf16,fp32 --out outputs/bench/allocator.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

from figures import emit_json, headline, log  # noqa: E402

from hybridrl.utils.cpu_allocator import ENV_KEY, ENV_VARS, choose_allocator  # noqa: E402

# the quickstart's update: 4 prompts x 8 samples, one shared prompt per group, micro-batch 16
DEFAULT_TRAIN_ARGS = ("--models smollm2 --batch 32 --prompt-len 64 --response-len 16 --micro 16 --group-size 8 "
                      "--layouts padded_shared --phases update --repeats 3 --warmup 1")


def allocator_env(setting: str, environ: dict[str, str]) -> dict[str, str] | None:
    """The child's environment for ``setting``: the caller's without allocator variables, plus what hybridrl's
    workers would get. None when the setting's library is not installed."""
    base = {k: v for k, v in environ.items() if k not in ENV_VARS}
    try:
        choice = choose_allocator({ENV_KEY: setting})
    except ValueError:
        return None
    return {**base, **choice.env}


def run_child(command: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict[str, float]]:
    """Run ``command``; its rusage (minor faults, user and system seconds) from this process's children total."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    usage = {
        "minor_faults": after.ru_minflt - before.ru_minflt,
        "user_s": after.ru_utime - before.ru_utime,
        "sys_s": after.ru_stime - before.ru_stime,
    }
    return proc, usage


def bench_setting(setting: str, dtype: str, args: argparse.Namespace, out_dir: str) -> dict[str, Any]:
    env = allocator_env(setting, dict(os.environ))
    if env is None:
        return {"setting": setting, "dtype": dtype, "skipped": f"{setting} is not installed"}
    out = os.path.join(out_dir, f"{setting}_{dtype}.json")
    command = [sys.executable, str(HERE / "bench_train.py"), *args.train_args.split(), "--dtypes", dtype,
               "--threads", str(args.threads), "--out", out]
    proc, usage = run_child(command, env)
    if proc.returncode != 0:
        return {"setting": setting, "dtype": dtype, "error": f"exit {proc.returncode}", "tail": proc.stderr[-2000:]}
    record = json.loads(Path(out).read_text())["records"][0]
    result = {"setting": setting, "dtype": dtype, "update_s": record["seconds"], "cpu_s": record["cpu_seconds"],
              "tokens_per_s": record["tokens_per_s"], **usage}
    log(f"{setting} {dtype}: update median {record['seconds']['median']:.2f} s, {usage['minor_faults']} minor "
        f"faults, user {usage['user_s']:.1f} s, sys {usage['sys_s']:.1f} s")
    return result


def headlines(records: list[dict]) -> list[dict]:
    """Per dtype and setting: update seconds against the system allocator's (lower is better)."""
    rows = []
    for dtype in sorted({r["dtype"] for r in records}):
        system = next((r for r in records if r["dtype"] == dtype and r["setting"] == "system" and "update_s" in r),
                      None)
        for r in records:
            if r["dtype"] != dtype or r["setting"] == "system" or "update_s" not in r or system is None:
                continue
            rows.append(headline("allocator", f"{dtype} update, {r['setting']}", r["update_s"]["median"], "s",
                                 "glibc malloc as installed", system["update_s"]["median"], higher_is_better=False,
                                 note=f"minor faults {r['minor_faults']} vs {system['minor_faults']}; "
                                      f"sys {r['sys_s']:.1f} vs {system['sys_s']:.1f} s"))
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="system,glibc,jemalloc,tcmalloc",
                        help=f"comma list of {ENV_KEY} values (system: glibc as installed)")
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--train-args", default=DEFAULT_TRAIN_ARGS, help="bench_train.py arguments (the shape)")
    parser.add_argument("--out", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as out_dir:
        # settings interleaved inside each dtype: a load change hits every setting alike
        records = [bench_setting(setting, dtype, args, out_dir)
                   for dtype in args.dtypes.split(",") if dtype for setting in args.settings.split(",") if setting]
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    result = {"benchmark": "allocator", "settings": settings, "records": records, "headline": headlines(records)}
    emit_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
