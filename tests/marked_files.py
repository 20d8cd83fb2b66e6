"""The test files that use a pytest marker, read from their source (nothing is imported).

``scripts/test.sh`` runs its vLLM stage over ``python tests/marked_files.py vllm`` (all files in one pytest process),
then ``python tests/marked_files.py --check-junit REPORT FILE...`` fails it if a file ran no test;
``tests/test_test_layout_on_cpu.py`` checks the layout with the same reading of markers. A file that only holds
the marker's name in a string (this suite's own layout checks do) is not marked.
"""

from __future__ import annotations

import ast
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def markers(source: str) -> set[str]:
    """Marker names used in a file: the ``x`` of every ``pytest.mark.x`` / ``mark.x`` attribute."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if (isinstance(owner, ast.Attribute) and owner.attr == "mark") or (
            isinstance(owner, ast.Name) and owner.id == "mark"
        ):
            found.add(node.attr)
    return found


def collected_test_files(root: Path = TESTS) -> list[Path]:
    """The files pytest collects as tests (its default ``python_files``: ``test_*.py`` and ``*_test.py``)."""
    return sorted({*root.rglob("test_*.py"), *root.rglob("*_test.py")})


def files_marked(marker: str, root: Path = TESTS) -> list[Path]:
    """Every collected test file under ``root`` that uses ``pytest.mark.<marker>`` somewhere."""
    return [path for path in collected_test_files(root) if marker in markers(path.read_text())]


def files_without_tests(junit_report: str, files: list[str]) -> list[str]:
    """The ``files`` (paths relative to the repository root) with no test case in pytest's JUnit XML report, whose
    ``classname`` is the test's dotted module path (``tests.serving.test_x_on_cpu``, plus ``.Class`` in a class)."""
    classnames = {case.get("classname", "") for case in ElementTree.parse(junit_report).iter("testcase")}
    missing = []
    for file in files:
        module = file.removesuffix(".py").replace("/", ".")
        if not any(name == module or name.startswith(module + ".") for name in classnames):
            missing.append(file)
    return missing


def main(argv: list[str]) -> int:
    if argv[:1] == ["--check-junit"] and len(argv) >= 2:
        missing = files_without_tests(argv[1], argv[2:])
        for file in missing:
            print(f"[test] ERROR: no test of {file} ran", file=sys.stderr)
        return 1 if missing else 0
    if len(argv) != 1:
        print(
            "usage: python tests/marked_files.py MARKER   (prints the test files using it, one a line)\n"
            "       python tests/marked_files.py --check-junit REPORT FILE...   (fails if a FILE ran no test)",
            file=sys.stderr,
        )
        return 2
    for path in files_marked(argv[0]):
        print(path.relative_to(TESTS.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
