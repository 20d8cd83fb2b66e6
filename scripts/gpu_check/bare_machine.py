"""Stand in for the bare GPU machine on a full CPU environment: make imports of Ray, vLLM, ... fail.

The GPU machine the kit is for has PyTorch and transformers but no Ray and no vLLM; the dry run blocks those
packages so that a GPU path that imports one of them fails here first. Two entries:

- :func:`block_imports` in a check's own process (``child.py``);
- ``python -m gpu_check.bare_machine <module> [args...]``: block per ``$GPU_CHECK_BLOCKED_IMPORTS`` (comma
  separated), then run ``<module>`` as ``__main__`` (the SFT check launches the trainer's ranks this way).
"""

from __future__ import annotations

import importlib.abc
import os
import runpy
import sys
from collections.abc import Iterable

BLOCKED_ENV_VAR = "GPU_CHECK_BLOCKED_IMPORTS"


class _BlockedImportFinder(importlib.abc.MetaPathFinder):
    """A meta-path finder that refuses the named top-level packages (and their submodules)."""

    def __init__(self, names: Iterable[str]):
        self.names = frozenset(names)

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001 (importlib's signature)
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked: the GPU machine has none)", name=fullname)
        return None


def block_imports(names: Iterable[str]) -> None:
    """Make ``import <name>`` fail for each name from now on in this process (no-op for an empty list)."""
    names = [name for name in names if name]
    if names and not any(isinstance(finder, _BlockedImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _BlockedImportFinder(names))


def main() -> None:
    module, *args = sys.argv[1:]
    block_imports(os.environ.get(BLOCKED_ENV_VAR, "").split(","))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
