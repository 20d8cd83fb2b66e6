"""tests/reliability_campaign.py stays true: every test it names exists, every case has a test (or says why not),
and the ``reliability`` marker (tests/conftest.py) selects exactly the campaign's tests.

The first checks read the test files' AST (nothing imported); the last collects the campaign's files only
(``pytest --co -m reliability``, a subprocess: no test runs).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from reliability_campaign import CASES, campaign_files, campaign_node_ids, strip_params

ROOT = Path(__file__).resolve().parents[1]


def defined_tests(path: Path) -> set[str]:
    """``function`` and ``Class::method`` of every test defined at the top of a test file."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
    return names


def test_case_ids_are_unique_and_every_case_has_a_test_or_a_reason():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    for case in CASES:
        assert case.area and case.holds, case.id
        assert case.tests or case.gap, f"{case.id}: no test, and no gap saying why"


def test_every_named_test_exists():
    missing = []
    for node_id in sorted(campaign_node_ids()):
        file, _, name = node_id.partition("::")
        path = ROOT / file
        if not path.name.startswith("test_") or not name.startswith(("test_", "Test")):
            missing.append(f"{node_id}: not a test's node id (tests/<path>/test_*.py::test_*)")
        elif not path.is_file():
            missing.append(f"{node_id}: no file {file}")
        elif name not in defined_tests(path):
            missing.append(f"{node_id}: {file} defines no {name}")
    assert not missing, "\n".join(missing)


def test_the_marker_selects_exactly_the_campaigns_tests():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "-m", "reliability",
         *campaign_files()],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    selected = [line for line in result.stdout.splitlines() if "::" in line]
    assert {strip_params(node_id) for node_id in selected} == campaign_node_ids()
    param_ids = {test for case in CASES for test in case.tests if "[" in test}
    assert param_ids <= set(selected), sorted(param_ids - set(selected))  # a named parametrisation exists too


def test_test_sh_has_a_stage_that_replays_the_campaign():
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    assert "reliability_stage" in test_sh and "run_pytest -m reliability" in test_sh
