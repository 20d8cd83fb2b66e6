"""Run each check in its own subprocess with a timeout, within one total time budget; print and collect outcomes.

Standard library only. Per check::

    timeout = min(check's own timeout, budget left)       budget left < MIN_CHECK_S -> SKIP "budget exhausted"
    python -m gpu_check.child <module> context.json result.json   (own process group; killed whole on timeout)
    result.json present -> its status;  absent -> FAIL "exit code N: <last log line>";  timeout -> FAIL "timeout"

One failing check never stops the others. Each check's stdout/stderr goes to ``<workdir>/logs/<check>.log``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# a check that cannot get this many seconds is skipped: it would not even import torch
MIN_CHECK_S = 20.0


@dataclass(frozen=True)
class CheckSpec:
    """A check: its name (the output's second word), the module with ``run(context)``, its own timeout."""

    name: str
    module: str
    timeout_s: float


@dataclass
class CheckResult:
    name: str
    status: str
    detail: str
    seconds: float
    figures: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """``STATUS check detail``, the kit's one line per check."""
        return f"{self.status} {self.name} {self.detail}"


def _last_line(log_path: Path) -> str:
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the check and everything it started (torchrun's ranks too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_one(spec: CheckSpec, context_path: Path, workdir: Path, timeout_s: float, env: dict[str, str]) -> CheckResult:
    """Run ``spec`` in a child process for at most ``timeout_s`` seconds."""
    result_path = workdir / "results" / f"{spec.name}.json"
    log_path = workdir / "logs" / f"{spec.name}.log"
    for folder in (result_path.parent, log_path.parent):
        folder.mkdir(parents=True, exist_ok=True)
    result_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "gpu_check.child", spec.module, str(context_path), str(result_path)]
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return CheckResult(spec.name, "FAIL", f"timeout after {timeout_s:.0f} s", time.monotonic() - start)
    seconds = time.monotonic() - start
    if not result_path.exists():
        return CheckResult(spec.name, "FAIL", f"exit code {returncode}: {_last_line(log_path)}", seconds)
    result = json.loads(result_path.read_text())
    return CheckResult(spec.name, result["status"], result["detail"], seconds, result.get("figures", {}))


def run_checks(
    specs: list[CheckSpec], context: dict[str, Any], workdir: Path, budget_s: float, env: dict[str, str]
) -> list[CheckResult]:
    """Run the checks in order within ``budget_s`` seconds in all; print each line as it comes."""
    workdir.mkdir(parents=True, exist_ok=True)
    context_path = workdir / "context.json"
    context_path.write_text(json.dumps(context, indent=1))
    deadline = time.monotonic() + budget_s
    results = []
    for spec in specs:
        left = deadline - time.monotonic()
        if left < MIN_CHECK_S:
            result = CheckResult(spec.name, "SKIP", f"budget exhausted ({left:.0f} s left of {budget_s:.0f} s)", 0.0)
        else:
            result = run_one(spec, context_path, workdir, min(spec.timeout_s, left), env)
        result.seconds = round(result.seconds, 2)
        print(result.line(), flush=True)
        results.append(result)
    return results


def write_report(results: list[CheckResult], path: Path, header: dict[str, Any]) -> dict[str, Any]:
    """The JSON of figures: ``header`` + ``checks`` {name: status, detail, seconds, figures} + ``summary``."""
    counts = {status: sum(r.status == status for r in results) for status in ("PASS", "FAIL", "SKIP")}
    report = {
        **header,
        "summary": counts,
        "checks": {
            r.name: {"status": r.status, "detail": r.detail, "seconds": r.seconds, "figures": r.figures}
            for r in results
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str))
    return report


def collect_logs(workdir: Path, names: list[str], path: Path) -> None:
    """All checks' logs in one file (one file comes back from the GPU machine more easily than many)."""
    parts = []
    for name in names:
        log = workdir / "logs" / f"{name}.log"
        text = log.read_text(errors="replace") if log.exists() else "(no log)\n"
        parts.append(f"===== {name} =====\n{text}")
    path.write_text("\n".join(parts))
