"""``hybridrl.algos`` is a leaf: it imports nothing from the trainer, the workers or the single controller.

Every import statement of every module (module level and inside functions) is read from the AST, so
a lazy import inside a function cannot hide an upward arrow.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import hybridrl.algos

ALGOS_DIR = pathlib.Path(hybridrl.algos.__file__).parent
FORBIDDEN = ("hybridrl.trainer", "hybridrl.workers", "hybridrl.single_controller")
# the hybridrl modules the math may use: itself and the tensor utilities (a leaf)
ALLOWED_HYBRIDRL = ("hybridrl.algos", "hybridrl.utils.torch_functional")


def imported_modules(path: pathlib.Path) -> set[str]:
    """Dotted names of everything ``path`` imports; ``from a import b`` yields ``a.b``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def test_algos_imports_only_leaves():
    modules = sorted(ALGOS_DIR.glob("*.py"))
    assert len(modules) >= 8
    for path in modules:
        hybridrl_imports = {name for name in imported_modules(path) if _within(name, ("hybridrl",))}
        upward = {name for name in hybridrl_imports if _within(name, FORBIDDEN)}
        assert not upward, f"{path.name} imports {sorted(upward)}: hybridrl.algos must stay a leaf"
        others = {name for name in hybridrl_imports if not _within(name, ALLOWED_HYBRIDRL)}
        assert not others, f"{path.name} imports {sorted(others)}; allowed: {ALLOWED_HYBRIDRL}"


def test_relative_imports_are_not_used():
    # relative imports would slip past the check above
    for path in ALGOS_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        assert not any(isinstance(n, ast.ImportFrom) and n.level > 0 for n in ast.walk(tree)), path.name


def test_importing_algos_loads_no_trainer_or_worker_module():
    modules = ", ".join(
        f"hybridrl.algos.{path.stem}" for path in sorted(ALGOS_DIR.glob("*.py")) if path.stem != "__init__"
    )
    code = (
        f"import importlib, sys\nfor m in '{modules}'.split(', '): importlib.import_module(m)\n"
        f"print([m for m in sys.modules if m.startswith({FORBIDDEN!r})])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
