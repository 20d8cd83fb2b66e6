"""The quickstart's scripts (examples/quickstart/*.py) as modules: the examples are not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def load(name: str):
    """``examples/quickstart/<name>.py`` executed as the module ``qs_<name>``."""
    spec = importlib.util.spec_from_file_location(f"qs_{name}", QUICKSTART / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
