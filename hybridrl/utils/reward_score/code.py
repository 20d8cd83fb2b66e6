"""Code scorer (verl's ``prime_code`` rules, run in hybridrl's local sandbox).

``ground_truth`` is a JSON string (or dict) ``{"inputs": [...], "outputs": [...], "fn_name": optional}``:
- without ``fn_name`` each test feeds ``inputs[i]`` on stdin and compares stdout with ``outputs[i]``;
- with ``fn_name`` each test calls ``fn_name(*inputs[i])`` (or ``Solution().fn_name``) and compares
  the return value with ``outputs[i]`` (or ``outputs[i][0]``, APPS wraps expected values in a list).

The program is the last fenced `````python`` block of the completion (the whole completion if none),
after removing ``<think>...</think>``. Score, as verl's ``continuous=True``: 1.0 if every test passes,
else the pass rate over the first 10 tests. Any failure of the machinery scores 0 and never raises.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from hybridrl.utils.reward_score.sandbox import SandboxLimits, SandboxUnavailableError, run_python

logger = logging.getLogger(__name__)

_CONTINUOUS_TESTS = 10
_CALL_DRIVER = """

import json as _json, sys as _sys
_args = _json.loads(_sys.stdin.read())
_fn = Solution().{fn} if "Solution" in globals() and hasattr(Solution, "{fn}") else {fn}
_out = _fn(*_args)
print("@@RESULT@@" + _json.dumps(list(_out) if isinstance(_out, tuple) else _out))
"""


def extract_program(completion: str) -> str:
    """Strip ``<think>`` blocks and return the last ```` ```python ```` block (or the text itself)."""
    completion = re.sub(r"<think>.*?</think>", "", completion, flags=re.DOTALL | re.IGNORECASE)
    return completion.split("```python")[-1].split("```")[0]


def outputs_match(actual: str, expected: Any) -> bool:
    """Compare program stdout with the expected text: per stripped line, then per token (floats to 1e-6)."""
    if isinstance(expected, list):
        expected = "\n".join(str(e) for e in expected)
    expected = str(expected)
    if actual.strip() == expected.strip():
        return True
    if [ln.strip() for ln in actual.strip().splitlines()] == [ln.strip() for ln in expected.strip().splitlines()]:
        return True
    got, want = actual.split(), expected.split()
    if len(got) != len(want):
        return False
    try:
        return all(g == w or abs(float(g) - float(w)) <= 1e-6 for g, w in zip(got, want))
    except ValueError:
        return False


def _run_call_case(program: str, fn_name: str, args: Any, expected: Any, limits: SandboxLimits) -> bool:
    result = run_python(program + _CALL_DRIVER.format(fn=fn_name), json.dumps(args), limits)
    marker = [ln for ln in result.stdout.splitlines() if ln.startswith("@@RESULT@@")]
    if not result.ok or not marker:
        return False
    value = json.loads(marker[-1][len("@@RESULT@@") :])
    return value == expected or (isinstance(expected, list) and bool(expected) and value == expected[0])


def run_test_case(program: str, tests: dict, index: int, limits: SandboxLimits) -> bool:
    """True if test ``index`` of ``tests`` passes."""
    test_input, expected = tests["inputs"][index], tests["outputs"][index]
    if tests.get("fn_name"):
        return _run_call_case(program, tests["fn_name"], test_input, expected, limits)
    stdin = "\n".join(map(str, test_input)) if isinstance(test_input, list) else str(test_input)
    result = run_python(program, stdin, limits)
    return result.ok and outputs_match(result.stdout, expected)


def compute_score(
    completion: str, test_cases: str | dict, continuous: bool = True, limits: SandboxLimits | None = None
) -> tuple[float, list[dict]]:
    """Return ``(score, per-test metadata)``; score is 1.0 if all tests pass, else the pass rate of the first 10."""
    limits = limits or SandboxLimits()
    try:
        tests = test_cases if isinstance(test_cases, dict) else json.loads(test_cases)
        program = extract_program(completion)
        num_tests = len(tests["inputs"])
        results: list[bool] = []
        for index in range(num_tests):
            results.append(run_test_case(program, tests, index, limits))
            if not results[-1] and not continuous:
                break
            if index >= _CONTINUOUS_TESTS - 1 and not all(results):
                break  # the score is already fixed by the first 10 tests
        metadata = [{"test_case": i, "passed": ok} for i, ok in enumerate(results)]
        if len(results) == num_tests and all(results):
            return 1.0, metadata
        if not continuous:
            return 0.0, metadata
        head = results[:_CONTINUOUS_TESTS]
        return sum(head) / max(len(head), 1), metadata
    except SandboxUnavailableError:
        raise  # no isolation and no opt-in: stop the run with the fix, never a silent score of 0
    except Exception as exc:  # malformed tests or sandbox trouble: score 0, keep training
        logger.warning("code scorer failed (%s: %s); scoring 0", type(exc).__name__, exc)
        return 0.0, [{"error": f"{type(exc).__name__}: {exc}"}]
