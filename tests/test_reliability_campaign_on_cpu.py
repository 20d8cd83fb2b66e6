"""tests/reliability_campaign.py stays true: every test it names exists, every case has a test (or says why not),
and the ``reliability`` marker (tests/conftest.py) goes to exactly the campaign's tests.

The checks read the test files' AST (nothing imported) and run the marking on stand-in items.
"""

from __future__ import annotations

import ast
from pathlib import Path

from reliability_campaign import CASES, campaign_node_ids, mark_reliability_campaign

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


def test_the_marker_goes_to_the_campaigns_tests_and_their_parametrisations_only():
    """``mark_reliability_campaign`` on stand-in items (collecting the campaign's 30 files would cost ~17 s)."""
    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid, self.markers = nodeid, []

        def add_marker(self, marker) -> None:
            self.markers.append(marker.name)

    named = sorted(campaign_node_ids())
    items = [Item(named[0]), Item(f"{named[1]}[case-a]"), Item("tests/test_other_on_cpu.py::test_not_in_it")]
    items.append(Item(named[2].replace("::", "::test_prefix_")))  # a similar name is not the test
    mark_reliability_campaign(items)
    assert [item.markers for item in items] == [["reliability"], ["reliability"], [], []]


def test_test_sh_has_a_stage_that_replays_the_campaign():
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    assert "reliability_stage" in test_sh and "run_pytest -m reliability" in test_sh
