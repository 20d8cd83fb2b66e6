"""Run one check in this process and write its outcome as JSON:

    python -m gpu_check.child <check module> <context.json> <result.json>

The check module has ``run(context: dict) -> Outcome``. An exception becomes a FAIL whose detail names it (the
traceback goes to stderr, which the orchestrator keeps in the log). ``context["blocked_imports"]`` (the dry run's
stand-in for the bare GPU machine, which has no Ray and no vLLM) makes importing those packages fail here.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from pathlib import Path

from gpu_check.bare_machine import block_imports
from gpu_check.outcome import Outcome


def run_check(module_name: str, context: dict) -> Outcome:
    """Import ``module_name`` and call its ``run(context)``; an exception is a FAIL naming it."""
    try:
        module = importlib.import_module(module_name)
        outcome = module.run(context)
        if not isinstance(outcome, Outcome):
            raise TypeError(f"{module_name}.run returned {type(outcome).__name__}, not an Outcome")
        return outcome
    except Exception as error:  # the check broke: report it as a FAIL, keep the traceback in the log
        traceback.print_exc()
        where = traceback.extract_tb(error.__traceback__)[-1]
        place = f"{Path(where.filename).name}:{where.lineno}"
        return Outcome("FAIL", f"{type(error).__name__}: {str(error)[:300]} (at {place})")


def third_party_modules() -> list[str]:
    """Top-level packages this process imported beyond the standard library (what a bare machine must have)."""
    local = {"gpu_check", "hybridrl", "__main__"}
    names = {name.partition(".")[0] for name in list(sys.modules)}
    return sorted(name for name in names - set(sys.stdlib_module_names) - local if not name.startswith("_"))


def main(argv: list[str]) -> int:
    module_name, context_path, result_path = argv
    context = json.loads(Path(context_path).read_text())
    block_imports(context.get("blocked_imports", []))
    start = time.monotonic()
    outcome = run_check(module_name, context)
    result = {**outcome.as_dict(), "seconds": round(time.monotonic() - start, 2)}
    result["figures"]["third_party_modules"] = third_party_modules()
    Path(result_path).write_text(json.dumps(result, indent=1, default=str))
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
