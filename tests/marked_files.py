"""The test files that use a pytest marker, read from their source (nothing is imported).

``scripts/test.sh`` runs its vLLM stage one file at a time over ``python tests/marked_files.py vllm``;
``tests/test_test_layout_on_cpu.py`` checks the layout with the same reading of markers. A file that only holds
the marker's name in a string (this suite's own layout checks do) is not marked.
"""

from __future__ import annotations

import ast
import sys
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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python tests/marked_files.py MARKER   (prints the test files using it, one a line)", file=sys.stderr
        )
        return 2
    for path in files_marked(argv[0]):
        print(path.relative_to(TESTS.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
