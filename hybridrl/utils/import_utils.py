"""Load user code named in the config, and check which optional packages are installed (verl's import_utils).

verl lets a user point a config key at Python code (``custom_reward_function.path``,
``data.custom_cls.path``, ``data.sampler.class_path``) and a name inside it. The path may be

    /abs/or/relative/file.py            a file, imported as a module
    file:///abs/file.py, file://rel.py  the same, as a URI
    pkg://package.module                an importable module (``pkg://package/module`` works too)

:func:`load_extern_type` imports it and fetches the name, with errors that say which file and which
name failed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable
from functools import cache, wraps
from types import ModuleType
from typing import Any

__all__ = [
    "deprecated",
    "import_external_libs",
    "is_megatron_core_available",
    "is_nvtx_available",
    "is_sglang_available",
    "is_trl_available",
    "is_vllm_available",
    "load_extern_object",
    "load_extern_type",
    "load_module_from_path",
]

_PKG_URI = "pkg://"
_FILE_URI = "file://"


# ---------------------------------------------------------------------------
# optional packages
# ---------------------------------------------------------------------------


def _installed(module_name: str) -> bool:
    try:
        return importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False


@cache
def is_megatron_core_available() -> bool:
    return _installed("megatron.core")


@cache
def is_vllm_available() -> bool:
    return _installed("vllm")


@cache
def is_sglang_available() -> bool:
    return _installed("sglang")


@cache
def is_nvtx_available() -> bool:
    return _installed("nvtx")


@cache
def is_trl_available() -> bool:
    return _installed("trl")


def import_external_libs(external_libs: str | list[str] | None = None) -> None:
    """Import ``model.external_lib`` (one module name or a list), e.g. a module registering custom models."""
    if not external_libs:
        return
    for name in external_libs if isinstance(external_libs, list | tuple) else [external_libs]:
        importlib.import_module(name)


# ---------------------------------------------------------------------------
# user code by path
# ---------------------------------------------------------------------------


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
            f"Custom type file '{file_path}' not found ({key}; resolved to {path}). Fix the path in the config."
        )
    digest = hashlib.sha1(path.encode()).hexdigest()[:12]
    module_name = f"hybridrl_extern_{os.path.splitext(os.path.basename(path))[0]}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"Error loading module from '{file_path}' ({key}): not importable as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before executing so classes defined in it pickle by reference (process pools, Ray).
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise RuntimeError(f"Error loading module from '{file_path}' ({key}): {type(exc).__name__}: {exc}") from exc
    return module


def _load_module(file_path: str, key: str) -> ModuleType:
    """A ``pkg://`` module, or a file (with or without ``file://``)."""
    if file_path.startswith(_PKG_URI):
        return importlib.import_module(file_path[len(_PKG_URI) :].replace("/", "."))
    if file_path.startswith(_FILE_URI):
        file_path = file_path[len(_FILE_URI) :]
    return load_module_from_path(file_path, key=key)


def load_extern_type(file_path: str | None, type_name: str | None, key: str = "path") -> Any:
    """Return the object named ``type_name`` defined at ``file_path`` (None when ``file_path`` is empty).

    Args:
        file_path: a Python file, ``file://`` URI or ``pkg://module.path`` (see the module docstring).
        type_name: the class, function or constant to fetch.
        key: the config key the path came from, quoted in error messages.

    Raises:
        FileNotFoundError: the file does not exist.
        RuntimeError: importing the file raised.
        ModuleNotFoundError: a ``pkg://`` module is not importable.
        AttributeError: the module defines no ``type_name``.
    """
    if not file_path:
        return None
    module = _load_module(str(file_path), key)
    if type_name is None or not hasattr(module, type_name):
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        raise AttributeError(
            f"Custom type '{type_name}' not found in '{file_path}' ({key}); names defined there: {public}"
        )
    return getattr(module, type_name)


# verl's other name for the same helper.
load_extern_object = load_extern_type


# ---------------------------------------------------------------------------
# deprecation
# ---------------------------------------------------------------------------


def deprecated(replacement: str = "") -> Callable[[Any], Any]:
    """Decorator: calling the function (or constructing the class) warns ``FutureWarning`` naming it."""

    def decorator(obj: Any) -> Any:
        qualified_name = f"{obj.__module__}.{obj.__qualname__}"
        kind = "Class" if isinstance(obj, type) else "Function"
        message = f"Warning: {kind} '{qualified_name}' is deprecated."
        if replacement:
            message += f" Please use '{replacement}' instead."
        target = obj.__init__ if isinstance(obj, type) else obj

        @wraps(target)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            warnings.warn(message, category=FutureWarning, stacklevel=2)
            return target(*args, **kwargs)

        if isinstance(obj, type):
            obj.__init__ = wrapped
            return obj
        return wrapped

    return decorator
