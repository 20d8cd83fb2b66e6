"""Command line of the GPU kit (``bash scripts/gpu_check.sh`` runs ``python -m gpu_check``); see ``__init__.py``."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from gpu_check.environment import install_missing
from gpu_check.orchestrate import CheckSpec, collect_logs, run_checks, write_report

# order matters: the cheap environment probe first, the long MFU measurement last
CHECKS = (
    CheckSpec("environment", "gpu_check.check_environment", 90),
    CheckSpec("attention", "gpu_check.check_attention", 60),
    CheckSpec("sft", "gpu_check.check_sft", 180),
    CheckSpec("worker", "gpu_check.check_worker", 150),
    CheckSpec("rollout", "gpu_check.check_rollout", 120),
    CheckSpec("offload", "gpu_check.check_offload", 150),
    CheckSpec("mfu", "gpu_check.check_mfu", 240),
)
# the bare GPU machine has neither; the dry run blocks them so a GPU path that needs one fails here first
DRY_RUN_BLOCKED_IMPORTS = ("ray", "vllm", "sglang")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    names = [spec.name for spec in CHECKS]
    parser = argparse.ArgumentParser(prog="gpu_check", description="hybridrl's GPU kit (see docs/performance.md)")
    parser.add_argument("--dry-run", action="store_true", help="CPU, gloo, tiny sizes (the test suite runs this)")
    parser.add_argument("--wheels", type=Path, default=None, help="folder of wheels to install missing packages from")
    parser.add_argument("--budget-s", type=float, default=480.0, help="total seconds for all checks (default 8 min)")
    parser.add_argument("--only", default=",".join(names), help=f"comma-separated subset of {','.join(names)}")
    parser.add_argument("--json", type=Path, default=None, help="report path (default $OUT/gpu_check.json or ./)")
    parser.add_argument("--workdir", type=Path, default=None, help="models, data, logs (default: a temp folder)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="bf16 dense peak to use for the MFU")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only.split(",")) - set(names))
    if unknown:
        parser.error(f"--only: unknown check(s) {unknown}; choose from {names}")
    return args


def default_json_path() -> Path:
    """``$OUT/gpu_check.json`` when ``$OUT`` is set (the device tool brings that folder back), else ./gpu_check.json."""
    out = os.environ.get("OUT")
    return (Path(out) if out else Path.cwd()) / "gpu_check.json"


def child_env(site_dir: Path | None) -> dict[str, str]:
    """The checks' environment: offline hub, this package and hybridrl importable, the carried wheels first."""
    repo_root = Path(__file__).resolve().parents[2]
    paths = [str(site_dir)] if site_dir else []
    paths += [str(repo_root), str(repo_root / "scripts"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started, start = datetime.datetime.now(datetime.timezone.utc), time.monotonic()
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="gpu_check_"))).resolve()
    site_dir = workdir / "site"
    wheels = install_missing(args.wheels, site_dir) if args.wheels else {"wheel_folder": None}
    blocked = list(DRY_RUN_BLOCKED_IMPORTS) if args.dry_run else []
    context = {
        "mode": "dry-run" if args.dry_run else "gpu",
        "device": "cpu" if args.dry_run else "cuda",
        "workdir": str(workdir),
        "blocked_imports": blocked,
        "peak_tflops": args.peak_tflops,
        "wheels": wheels,
    }
    env = child_env(site_dir if site_dir.exists() else None)
    env["GPU_CHECK_BLOCKED_IMPORTS"] = ",".join(blocked)
    specs = [spec for spec in CHECKS if spec.name in args.only.split(",")]
    print(f"[gpu_check] mode={context['mode']} budget={args.budget_s:.0f}s workdir={workdir}", flush=True)
    results = run_checks(specs, context, workdir, args.budget_s, env)
    header = {
        "kit": "hybridrl scripts/gpu_check.sh",
        "mode": context["mode"],
        "started_utc": started.isoformat(timespec="seconds"),
        "total_s": round(time.monotonic() - start, 2),
        "budget_s": args.budget_s,
        "python": platform.python_version(),
        "host": platform.node(),
        "wheels": wheels,
        "blocked_imports": blocked,
        "workdir": str(workdir),
    }
    json_path = args.json or default_json_path()
    report = write_report(results, json_path, header)
    collect_logs(workdir, [spec.name for spec in specs], json_path.with_suffix(".log"))
    print(f"[gpu_check] {report['summary']} in {header['total_s']:.0f} s; figures: {json_path}", flush=True)
    print(json_path.read_text(), flush=True)
    return 1 if report["summary"]["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
