"""Small Python helpers with no hybridrl dependencies (verl 0.5 path: ``verl.utils.py_functional``).

What lives here, as in verl:
    timeout_limit            run a function with a time limit (child process by default, SIGALRM on request)
    append_to_dict           ``{k: [v1, v2]}`` metric accumulation
    union_two_dict           merge two dicts whose shared keys must agree (DataProto's meta_info union)
    deep_equal               equality through containers, numpy arrays and tensors, NaN == NaN
    NestedNamespace          attribute access into nested dicts
    DynamicEnumMeta/DynamicEnum  an enum whose members are added at runtime (``Dispatch``, ``Execute``)
    temp_env_var             set an environment variable for the duration of a ``with`` block
    convert_to_regular_types OmegaConf containers → plain dicts and lists
"""

from __future__ import annotations

import math
import multiprocessing
import os
import pickle
import queue
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from types import SimpleNamespace
from typing import Any, ClassVar

__all__ = [
    "DynamicEnum",
    "DynamicEnumMeta",
    "NestedNamespace",
    "append_to_dict",
    "convert_to_regular_types",
    "deep_equal",
    "temp_env_var",
    "timeout_limit",
    "union_two_dict",
]

# How long a timed-out child gets to exit after SIGTERM, and how long the parent waits for a finished
# child's result to arrive through the queue (the child put it before exiting, so this is only a grace).
_TERMINATE_GRACE_S = 0.5
_RESULT_GRACE_S = 0.1


# ---------------------------------------------------------------------------
# timeout_limit
# ---------------------------------------------------------------------------


def _run_and_report(func: Callable, results: Any, args: tuple, kwargs: dict[str, Any]) -> None:
    """Child-process body: put ``(True, result)`` or ``(False, exception)`` on ``results``.

    Module level so that it pickles under the ``spawn`` start method. An exception that cannot be
    pickled is replaced by a ``RuntimeError`` naming its type.
    """
    try:
        results.put((True, func(*args, **kwargs)))
    except Exception as error:
        try:
            pickle.dumps(error)
        except (pickle.PicklingError, TypeError, AttributeError):
            error = RuntimeError(f"Original exception type {type(error).__name__} not pickleable: {error}")
        results.put((False, error))


def _with_process_timeout(func: Callable, seconds: float) -> Callable:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        results: Any = multiprocessing.Queue(maxsize=1)
        child = multiprocessing.Process(target=_run_and_report, args=(func, results, args, kwargs))
        child.start()
        child.join(timeout=seconds)
        try:
            if child.is_alive():
                child.terminate()
                child.join(timeout=_TERMINATE_GRACE_S)
                if child.is_alive():  # SIGTERM caught by an inherited Python handler that cannot run (a forked
                    child.kill()      # child blocked on a lock another thread held at fork): the exit would wait
                    child.join()      # on it forever
                raise TimeoutError(f"Function {func.__name__} timed out after {seconds} seconds (multiprocessing)!")
            try:
                ok, value = results.get(timeout=_RESULT_GRACE_S)
            except queue.Empty as empty:
                if child.exitcode:
                    raise RuntimeError(
                        f"Child process exited with error (exitcode: {child.exitcode}) before returning result."
                    ) from empty
                raise TimeoutError(
                    f"Operation timed out or process finished unexpectedly without result (exitcode: {child.exitcode})."
                ) from empty
            if not ok:
                raise value
            return value
        finally:
            results.close()
            results.join_thread()

    return wrapper


def _with_signal_timeout(func: Callable, seconds: float) -> Callable:
    if os.name != "posix":
        raise NotImplementedError(f"Unsupported OS: {os.name}")
    print(
        "WARN: timeout_limit(use_signals=True) is deprecated: SIGALRM only works in the main thread. "
        "Use the default process-based timeout (use_signals=False)."
    )

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        def on_alarm(signum: int, frame: Any) -> None:
            raise TimeoutError(f"Function {func.__name__} timed out after {seconds} seconds (signal)!")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)  # float seconds, unlike signal.alarm
        try:
            return func(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    return wrapper


def timeout_limit(seconds: float, use_signals: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: the call raises ``TimeoutError`` if ``func`` runs longer than ``seconds``.

    By default ``func`` runs in a child process (works from any thread; arguments, result and
    exceptions must pickle; the child is terminated on timeout). ``use_signals=True`` (deprecated,
    POSIX, main thread only) uses ``SIGALRM`` in the calling process instead.

    Raises:
        TimeoutError: the time limit passed; the message says ``timed out after {seconds} seconds``.
        RuntimeError: the child process died without a result.
        NotImplementedError: ``use_signals=True`` on a non-POSIX system.
        Any exception ``func`` raised is re-raised as is.
    """

    def decorator(func: Callable) -> Callable:
        if use_signals:
            return _with_signal_timeout(func, seconds)
        return _with_process_timeout(func, seconds)

    return decorator


# ---------------------------------------------------------------------------
# dicts and namespaces
# ---------------------------------------------------------------------------


def append_to_dict(data: dict[str, list[Any]], new_data: dict[str, Any]) -> None:
    """Append each value of ``new_data`` to the list under the same key of ``data`` (in place)."""
    for key, value in new_data.items():
        data.setdefault(key, []).append(value)


class NestedNamespace(SimpleNamespace):
    """``NestedNamespace({"a": 1, "b": {"c": 2}}).b.c == 2``: nested dicts become namespaces too."""

    def __init__(self, dictionary: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for key, value in dictionary.items():
            setattr(self, key, NestedNamespace(value) if isinstance(value, dict) else value)


def convert_to_regular_types(obj: Any) -> Any:
    """OmegaConf ``DictConfig``/``ListConfig`` (and nested tuples) → plain ``dict``/``list``, recursively.

    Values inside a ``ListConfig`` are listed as they are (verl).
    """
    from omegaconf import DictConfig, ListConfig

    if isinstance(obj, DictConfig):
        return {key: convert_to_regular_types(value) for key, value in obj.items()}
    if isinstance(obj, ListConfig):
        return list(obj)
    if isinstance(obj, list | tuple):
        return [convert_to_regular_types(item) for item in obj]
    if isinstance(obj, dict):
        return {key: convert_to_regular_types(value) for key, value in obj.items()}
    return obj


@contextmanager
def temp_env_var(key: str, value: str) -> Iterator[None]:
    """Set ``os.environ[key] = value`` inside the block; restore the old value (or unset it) after."""
    original = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if original is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = original


def deep_equal(a: Any, b: Any) -> bool:
    """Equality that treats NaN == NaN, recurses into object arrays/lists/dicts and compares tensors.

    numpy and torch are looked up in ``sys.modules``, not imported: a value that is an array or a tensor
    means its library is loaded, so this module stays free of both.
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    np = sys.modules.get("numpy")
    if np is not None and isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype != object:
            return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        return all(deep_equal(x, y) for x, y in zip(a.flat, b.flat))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def union_two_dict(dict1: dict[str, Any], dict2: dict[str, Any]) -> dict[str, Any]:
    """Merge ``dict2`` into ``dict1`` (in place); shared keys must be equal (meta_info union).

    Raises:
        AssertionError: a shared key holds different values (as verl's assert; kept under ``python -O``).
    """
    for key, val in dict2.items():
        if key in dict1 and not deep_equal(dict1[key], val):
            raise AssertionError(f"union: conflicting values for meta_info key '{key}': {dict1[key]!r} vs {val!r}")
        dict1[key] = val
    return dict1


# ---------------------------------------------------------------------------
# DynamicEnum
# ---------------------------------------------------------------------------


class DynamicEnumMeta(type):
    """``for m in E``, ``"NAME" in E``, ``member in E``, ``E["NAME"]``, ``len(E)``, ``E.names()``, ``E.values()``."""

    _registry: dict[str, Any]

    def __iter__(cls) -> Iterator[Any]:
        return iter(cls._registry.values())

    def __contains__(cls, item: object) -> bool:
        if isinstance(item, str):
            return item in cls._registry
        return item in cls._registry.values()

    def __getitem__(cls, name: str) -> Any:
        return cls._registry[name]

    def __len__(cls) -> int:
        return len(cls._registry)

    def names(cls) -> list[str]:
        return list(cls._registry)

    def values(cls) -> list[Any]:
        return list(cls._registry.values())


class DynamicEnum(metaclass=DynamicEnumMeta):
    """An enum whose members are added at runtime; each subclass has its own registry.

    Names are upper-cased (``E.register("my_mode")`` adds ``E.MY_MODE``), as in verl. Members pickle
    by name: a member registered only in the driver is re-created when a Ray worker unpickles it.
    """

    _registry: ClassVar[dict[str, DynamicEnum]]
    _next_value: ClassVar[int]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._registry = {}
        cls._next_value = 0

    def __init__(self, name: str, value: int) -> None:
        self.name = name
        self.value = value

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value}>"

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (_restore_member, (type(self), self.name))

    @classmethod
    def register(cls, name: str) -> DynamicEnum:
        """Add member ``name.upper()``; ``ValueError`` if it exists already."""
        key = name.upper()
        if key in cls._registry:
            raise ValueError(f"{key} already registered in {cls.__name__}")
        member = cls(key, cls._next_value)
        cls._next_value += 1
        cls._registry[key] = member
        setattr(cls, key, member)
        return member

    @classmethod
    def remove(cls, name: str) -> DynamicEnum:
        """Remove member ``name.upper()`` and return it."""
        key = name.upper()
        member = cls._registry.pop(key)
        delattr(cls, key)
        return member

    @classmethod
    def from_name(cls, name: str) -> DynamicEnum | None:
        return cls._registry.get(name.upper())


def _restore_member(cls: type[DynamicEnum], name: str) -> DynamicEnum:
    """Unpickle a member by name, registering it if this process has not seen it yet."""
    member = cls.from_name(name)
    return member if member is not None else cls.register(name)
