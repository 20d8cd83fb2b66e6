"""Import a class named by a dotted path in a user YAML (tools, interactions), mapping verl's package.

``class_name: verl.tools.gsm8k_tool.Gsm8kTool`` in a verl YAML resolves to
``hybridrl.tools.gsm8k_tool.Gsm8kTool``; every failure names the file, the entry and the fix.

Importing the module runs its top-level code (a YAML's ``class_name`` is code the run executes, as
``custom_reward_function.path`` is); what is then built from it is checked first: a class that does not derive
from the expected base (``BaseTool``, ``BaseInteraction``) is refused before it is constructed.
"""

from __future__ import annotations

import importlib
import logging

logger = logging.getLogger(__name__)

_VERL_PREFIX = "verl."
_OUR_PREFIX = "hybridrl."


def import_class_path(class_name: str, where: str, base: type | None = None) -> type:
    """The class at ``class_name`` (``package.module.ClassName``); ``verl.`` is read as ``hybridrl.``.

    Args:
        class_name: dotted import path of the class.
        where: the file and entry it came from, quoted in errors (``"tools[0] of /x/tool.yaml"``).
        base: when given, the class must derive from it (checked before anything is constructed).

    Raises:
        ModuleNotFoundError: the module (or a module it imports) does not exist; verl raises this type too, so
            code that catches it keeps working. The message names ``where`` and the fix.
        ValueError: not a dotted path, the module has no such name, it is not a class, or not a ``base``.
        RuntimeError: importing the module raised anything else.
    """
    if not isinstance(class_name, str) or "." not in class_name:
        raise ValueError(
            f"{where}: class_name must be a dotted import path like 'pkg.module.Class', got {class_name!r}"
        )
    resolved = class_name
    if class_name.startswith(_VERL_PREFIX):
        resolved = _OUR_PREFIX + class_name[len(_VERL_PREFIX) :]
        logger.info("%s: class_name %s read as %s", where, class_name, resolved)
    module_name, _, attribute = resolved.rpartition(".")
    origin = f"'{class_name}'" + (f" (read as '{resolved}')" if resolved != class_name else "")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            _not_found_message(where, origin, module_name, resolved != class_name, exc), name=exc.name
        ) from exc
    except Exception as exc:  # the user's module itself raised while importing
        raise RuntimeError(f"{where}: importing '{module_name}' for class_name {origin} raised {exc!r}") from exc
    if not hasattr(module, attribute):
        public = sorted(
            name for name in vars(module) if not name.startswith("_") and isinstance(vars(module)[name], type)
        )
        raise ValueError(f"{where}: class_name {origin}: '{module_name}' has no '{attribute}' (its classes: {public})")
    found = getattr(module, attribute)
    if not isinstance(found, type):
        raise ValueError(f"{where}: class_name {origin} is a {type(found).__name__}, not a class")
    if base is not None and not issubclass(found, base):
        raise ValueError(
            f"{where}: class_name {origin} is not a {base.__name__}: derive it from {base.__module__}.{base.__name__} "
            "(it was not constructed)"
        )
    return found


def _not_found_message(where: str, origin: str, module_name: str, mapped: bool, exc: ModuleNotFoundError) -> str:
    """Why the import failed: the named module (or its package) is absent, or it imports an absent module."""
    missing = exc.name or ""
    if missing and not (module_name == missing or module_name.startswith(missing + ".")):
        return (
            f"{where}: class_name {origin}: importing '{module_name}' needs module '{missing}', which is not "
            "installed; install it or drop this entry"
        )
    hint = (
        "hybridrl does not provide that verl module: port the class and give its import path"
        if mapped
        else "check the path and that the module is importable (on PYTHONPATH)"
    )
    return f"{where}: class_name {origin}: module '{module_name}' not found ({exc}); {hint}"
