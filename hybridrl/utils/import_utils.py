"""Load user code by file path: custom reward functions, dataset classes, samplers.

verl lets a user point a config key at a Python file (``custom_reward_function.path``,
``data.custom_cls.path``, ``data.sampler.class_path``) and a name inside it. These helpers import
that file as a module and fetch the name, with errors that say which file and which name failed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any


def load_module_from_path(file_path: str, key: str = "path") -> ModuleType:
    """Import ``file_path`` as a module (cached in ``sys.modules`` under a name derived from the path).

    Args:
        file_path: a ``.py`` file; ``~`` is expanded.
        key: the config key the path came from, quoted in error messages.

    Raises:
        FileNotFoundError: the file does not exist.
        RuntimeError: executing the module raised (the original error is chained).
    """
    path = os.path.abspath(os.path.expanduser(str(file_path)))
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{key}={file_path!r}: file not found (resolved to {path}). Fix the path in the config."
        )
    digest = hashlib.sha1(path.encode()).hexdigest()[:12]
    module_name = f"hybridrl_extern_{os.path.splitext(os.path.basename(path))[0]}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"{key}={file_path!r}: cannot import this file as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before executing so classes defined in it pickle by reference (process pools, Ray).
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise RuntimeError(f"{key}={file_path!r}: importing the file raised {type(exc).__name__}: {exc}") from exc
    return module


def load_extern_type(file_path: str, type_name: str, key: str = "path") -> Any:
    """Return the object named ``type_name`` defined in the Python file ``file_path``.

    Raises:
        FileNotFoundError / RuntimeError: see :func:`load_module_from_path`.
        AttributeError: the file defines no ``type_name``.
    """
    module = load_module_from_path(file_path, key=key)
    if not hasattr(module, type_name):
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        raise AttributeError(f"{key}={file_path!r} defines no {type_name!r}; names defined there: {public}")
    return getattr(module, type_name)


# verl's other name for the same helper.
load_extern_object = load_extern_type
