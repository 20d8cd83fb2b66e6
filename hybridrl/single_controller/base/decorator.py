"""``@register``: how a worker method is fanned out by the single controller (verl's decorator.py).

A driver call ``wg.method(*args)`` runs ``dispatch_fn → execute_fn → ray.get (if blocking) →
collect_fn``. ``register`` attaches the three choices to the method under verl's magic attribute
name; the worker group reads them when it binds the method.

    mode                        dispatch (driver → N workers)            collect (N outputs → driver)
    ONE_TO_ALL                  every arg replicated to every worker     list of N outputs
    ALL_TO_ALL                  pass-through                             pass-through
    DP_COMPUTE                  args are already lists of length N       list of N outputs
    DP_COMPUTE_PROTO            DataProto args chunked N ways (+ auto    DataProto.concat
                                padding to a multiple of N if enabled)
    DP_COMPUTE_PROTO_WITH_FUNC  arg0 (a function) replicated, rest       DataProto.concat
                                chunked like DP_COMPUTE_PROTO
    DP_COMPUTE_METRIC           chunked like DP_COMPUTE_PROTO            list of N outputs (no concat)
    RANK_ZERO / DIRECT_ROLLOUT  no predefined functions
    make_nd_compute_dataproto_dispatch_fn(mesh): chunk by the mesh's dp size; worker i gets chunk
                                dp_rank[i]; only workers with is_collect=True are collected.

Non-blocking calls hand back ``DataProtoFuture``; registered methods materialize such futures on the
worker before running. Registered methods may be ``async def``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import wraps
from typing import Any, ClassVar, cast

from hybridrl.single_controller.base.dispatch_fns import (
    PADDING_SIZE_KEY,
    collect_all_to_all,
    collect_dp_compute,
    collect_dp_compute_data_proto,
    dispatch_all_to_all,
    dispatch_dp_compute,
    dispatch_dp_compute_data_proto,
    dispatch_dp_compute_data_proto_with_func,
    dispatch_one_to_all,
    dummy_direct_rollout_call,
    make_nd_compute_dataproto_dispatch_fn,
    unpad_output,
)
from hybridrl.utils.py_functional import DynamicEnum

__all__ = [
    "MAGIC_ATTR",
    "PADDING_SIZE_KEY",
    "Dispatch",
    "Execute",
    "register",
    "register_dispatch_mode",
    "update_dispatch_mode",
    "get_predefined_dispatch_fn",
    "get_predefined_execute_fn",
    "make_nd_compute_dataproto_dispatch_fn",
    "dispatch_one_to_all",
    "dispatch_all_to_all",
    "collect_all_to_all",
    "dispatch_dp_compute",
    "collect_dp_compute",
    "dispatch_dp_compute_data_proto",
    "dispatch_dp_compute_data_proto_with_func",
    "collect_dp_compute_data_proto",
    "unpad_output",
]

# verl's attribute name: code that inspects registered methods (ours or verl-derived) finds it here.
MAGIC_ATTR = "attrs_3141562937"


class Dispatch(DynamicEnum):
    """How arguments are split across workers and outputs gathered (extensible at runtime)."""

    # predefined members (registered below; declared here for type checkers)
    RANK_ZERO: ClassVar[Dispatch]
    ONE_TO_ALL: ClassVar[Dispatch]
    ALL_TO_ALL: ClassVar[Dispatch]
    DP_COMPUTE: ClassVar[Dispatch]
    DP_COMPUTE_PROTO: ClassVar[Dispatch]
    DP_COMPUTE_PROTO_WITH_FUNC: ClassVar[Dispatch]
    DP_COMPUTE_METRIC: ClassVar[Dispatch]
    DIRECT_ROLLOUT_METHOD: ClassVar[Dispatch]


class Execute(DynamicEnum):
    """Which workers run a call: ``ALL`` or ``RANK_ZERO``."""

    ALL: ClassVar[Execute]
    RANK_ZERO: ClassVar[Execute]


for _name in (
    "RANK_ZERO",
    "ONE_TO_ALL",
    "ALL_TO_ALL",
    "DP_COMPUTE",
    "DP_COMPUTE_PROTO",
    "DP_COMPUTE_PROTO_WITH_FUNC",
    "DP_COMPUTE_METRIC",
    "DIRECT_ROLLOUT_METHOD",
):
    if _name not in Dispatch:
        Dispatch.register(_name)
for _name in ("ALL", "RANK_ZERO"):
    if _name not in Execute:
        Execute.register(_name)

DispatchSpec = dict[str, Callable[..., Any]]

DISPATCH_MODE_FN_REGISTRY: dict[Dispatch, DispatchSpec] = {
    Dispatch.ONE_TO_ALL: {"dispatch_fn": dispatch_one_to_all, "collect_fn": collect_all_to_all},
    Dispatch.ALL_TO_ALL: {"dispatch_fn": dispatch_all_to_all, "collect_fn": collect_all_to_all},
    Dispatch.DP_COMPUTE: {"dispatch_fn": dispatch_dp_compute, "collect_fn": collect_dp_compute},
    Dispatch.DP_COMPUTE_PROTO: {
        "dispatch_fn": dispatch_dp_compute_data_proto,
        "collect_fn": collect_dp_compute_data_proto,
    },
    Dispatch.DP_COMPUTE_PROTO_WITH_FUNC: {
        "dispatch_fn": dispatch_dp_compute_data_proto_with_func,
        "collect_fn": collect_dp_compute_data_proto,
    },
    Dispatch.DP_COMPUTE_METRIC: {"dispatch_fn": dispatch_dp_compute_data_proto, "collect_fn": collect_dp_compute},
    Dispatch.DIRECT_ROLLOUT_METHOD: {"dispatch_fn": dummy_direct_rollout_call, "collect_fn": dummy_direct_rollout_call},
}

_EXECUTE_FN_NAMES = {"ALL": "execute_all", "RANK_ZERO": "execute_rank_zero"}


def get_predefined_dispatch_fn(dispatch_mode: Dispatch) -> DispatchSpec:
    """The ``{"dispatch_fn", "collect_fn"}`` pair of a registered mode."""
    if dispatch_mode not in DISPATCH_MODE_FN_REGISTRY:
        raise KeyError(
            f"{dispatch_mode} has no dispatch/collect functions; register them with "
            "register_dispatch_mode(name, dispatch_fn, collect_fn) or pass a dict to @register"
        )
    return DISPATCH_MODE_FN_REGISTRY[dispatch_mode]


def get_predefined_execute_fn(execute_mode: Execute) -> dict[str, str]:
    """``{"execute_fn_name": "execute_all" | "execute_rank_zero"}`` for a worker-group method."""
    return {"execute_fn_name": _EXECUTE_FN_NAMES[execute_mode.name]}


def register_dispatch_mode(dispatch_mode_name: str, dispatch_fn: Callable, collect_fn: Callable) -> Dispatch:
    """Add ``Dispatch.<dispatch_mode_name>`` with its functions; returns the new member.

    ``dispatch_fn(worker_group, *args, **kwargs) -> (args, kwargs)`` where every returned arg is a
    list of ``worker_group.world_size`` items (item i goes to worker i);
    ``collect_fn(worker_group, outputs: list) -> Any``.
    """
    dispatch_mode = cast(Dispatch, Dispatch.register(dispatch_mode_name))
    DISPATCH_MODE_FN_REGISTRY[dispatch_mode] = {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}
    return dispatch_mode


def update_dispatch_mode(dispatch_mode: Dispatch, dispatch_fn: Callable, collect_fn: Callable) -> None:
    """Replace the functions of an existing mode (affects worker groups bound afterwards)."""
    _check_dispatch_mode(dispatch_mode)
    if dispatch_mode not in DISPATCH_MODE_FN_REGISTRY:
        raise KeyError(f"{dispatch_mode} is not registered; use register_dispatch_mode first")
    DISPATCH_MODE_FN_REGISTRY[dispatch_mode] = {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}


def _check_dispatch_mode(dispatch_mode: Any) -> None:
    if isinstance(dispatch_mode, dict):
        missing = {"dispatch_fn", "collect_fn"} - dispatch_mode.keys()
        if missing:
            raise ValueError(
                f"a dict dispatch_mode needs keys 'dispatch_fn' and 'collect_fn'; missing {sorted(missing)}"
            )
    elif not isinstance(dispatch_mode, Dispatch):
        raise TypeError(f"dispatch_mode must be a Dispatch member or a dict, got {type(dispatch_mode).__name__}")


def _check_execute_mode(execute_mode: Any) -> None:
    if not isinstance(execute_mode, Execute):
        raise TypeError(f"execute_mode must be an Execute member, got {type(execute_mode).__name__}")


def _materialize_futures(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Replace every ``DataProtoFuture`` argument by its value (``.get()``)."""
    from hybridrl.protocol import DataProtoFuture

    args = tuple(a.get() if isinstance(a, DataProtoFuture) else a for a in args)
    kwargs = {k: v.get() if isinstance(v, DataProtoFuture) else v for k, v in kwargs.items()}
    return args, kwargs


async def _await_futures(args: tuple, kwargs: dict) -> None:
    """Wait (without blocking the actor's event loop) until every ``DataProtoFuture`` input is ready."""
    from hybridrl.protocol import DataProtoFuture

    for value in (*args, *kwargs.values()):
        if isinstance(value, DataProtoFuture):
            for ref in value.futures:
                await ref


def register(
    dispatch_mode: Dispatch | dict = Dispatch.ALL_TO_ALL,
    execute_mode: Execute = Execute.ALL,
    blocking: bool = True,
    materialize_futures: bool = True,
) -> Callable[[Callable], Callable]:
    """Mark a worker method as callable from the driver through a worker group.

    Args:
        dispatch_mode: a ``Dispatch`` member or ``{"dispatch_fn": f, "collect_fn": g}``.
        execute_mode: ``Execute.ALL`` (every worker) or ``Execute.RANK_ZERO``.
        blocking: False makes the driver call return futures (``DataProtoFuture`` for proto modes).
        materialize_futures: resolve ``DataProtoFuture`` arguments on the worker before the call.

    A worker class with any ``async def`` method becomes an asyncio actor in Ray, whose tasks may
    run out of submission order and whose sync methods run on the event loop: there, pass futures
    only to ``async def`` methods (they await their inputs), or a sync method can block the loop
    waiting for a result that the same actor has not computed yet.
    """
    _check_dispatch_mode(dispatch_mode)
    _check_execute_mode(execute_mode)

    def decorator(func: Callable) -> Callable:
        @wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            if materialize_futures:
                args, kwargs = _materialize_futures(args, kwargs)
            return func(*args, **kwargs)

        @wraps(func)
        async def async_inner(*args: Any, **kwargs: Any) -> Any:
            if materialize_futures:
                await _await_futures(args, kwargs)  # yield the event loop while the inputs are computed
                args, kwargs = _materialize_futures(args, kwargs)
            return await func(*args, **kwargs)

        wrapper = async_inner if inspect.iscoroutinefunction(func) else inner
        attrs = {"dispatch_mode": dispatch_mode, "execute_mode": execute_mode, "blocking": blocking}
        setattr(wrapper, MAGIC_ATTR, attrs)
        return wrapper

    return decorator


def resolve_dispatch_fns(dispatch_mode: Dispatch | dict) -> tuple[Callable, Callable]:
    """``(dispatch_fn, collect_fn)`` for a method's ``dispatch_mode`` attribute."""
    _check_dispatch_mode(dispatch_mode)
    spec = dispatch_mode if isinstance(dispatch_mode, dict) else get_predefined_dispatch_fn(dispatch_mode)
    return spec["dispatch_fn"], spec["collect_fn"]
