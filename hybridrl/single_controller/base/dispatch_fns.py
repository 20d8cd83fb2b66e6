"""The dispatch and collect functions behind each ``Dispatch`` mode.

A dispatch function maps the driver's ``(*args, **kwargs)`` to per-worker argument lists:
``dispatch_fn(worker_group, *args, **kwargs) -> (args, kwargs)`` where every value is a list of
``worker_group.world_size`` items, item i going to worker i (or, for ALL_TO_ALL, the arguments
unchanged). A collect function maps the list of worker outputs back to one driver value.

Auto padding (DataProto args only, when ``is_padding_enabled()``): a batch of B rows is padded to a
multiple of the number of chunks; the pad count travels to the worker group under
``PADDING_SIZE_KEY`` and the worker group trims the collected output (``unpad_output``).
"""

from __future__ import annotations

from functools import partial
from types import FunctionType
from typing import Any

# verl's kwarg name for the pad count (stripped by the worker group before the call goes out).
PADDING_SIZE_KEY = "_padding_size_key_x123d"


def _protocol() -> Any:
    # Imported lazily: the protocol pulls in torch/tensordict, the decorator must stay cheap to import.
    import hybridrl.protocol as protocol

    return protocol


# ---------------------------------------------------------------------------- replicate / pass-through


def dispatch_one_to_all(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """Every worker receives the same arguments."""
    n = worker_group.world_size
    return tuple([arg] * n for arg in args), {k: [v] * n for k, v in kwargs.items()}


def dispatch_all_to_all(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """Arguments pass through unchanged (the execute function decides who gets what)."""
    return args, kwargs


def collect_all_to_all(worker_group: Any, output: Any) -> Any:
    return output


def dummy_direct_rollout_call(worker_group: Any, *args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("DIRECT_ROLLOUT_METHOD methods are called by the rollout engine, never from the driver")


# ---------------------------------------------------------------------------- data parallel


def dispatch_dp_compute(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """Arguments are already split: each must be a list/tuple of length ``world_size``."""
    n = worker_group.world_size
    for where, value in [*((f"arg {i}", a) for i, a in enumerate(args)), *kwargs.items()]:
        if not isinstance(value, (list, tuple)) or len(value) != n:
            raise ValueError(
                f"DP_COMPUTE needs every argument to be a list of world_size={n} items; {where} is "
                f"{type(value).__name__}{'' if not hasattr(value, '__len__') else f' of length {len(value)}'}"
            )
    # lists (not tuples): the worker group scatters list arguments item i -> worker i
    return tuple(list(a) for a in args), {k: list(v) for k, v in kwargs.items()}


def collect_dp_compute(worker_group: Any, output: list) -> list:
    if len(output) != worker_group.world_size:
        raise ValueError(f"expected {worker_group.world_size} outputs, got {len(output)}")
    return output


def _split_data_proto_args(chunks: int, args: tuple, kwargs: dict) -> tuple[list, dict, int | None]:
    """Chunk every DataProto/DataProtoFuture arg ``chunks`` ways, padding when enabled.

    Returns ``(args, kwargs, pad_size)``; pad_size is None when no arg was padded. All padded
    DataProtos must have the same length (they are rows of one batch).
    """
    protocol = _protocol()
    batch_len: int | None = None
    pad_size: int | None = None

    def split(name: str, obj: Any) -> list:
        nonlocal batch_len, pad_size
        if not isinstance(obj, (protocol.DataProto, protocol.DataProtoFuture)):
            raise TypeError(f"data-parallel dispatch needs DataProto arguments; {name} is {type(obj).__name__}")
        if isinstance(obj, protocol.DataProto):
            if obj.is_padding_enabled():
                if batch_len is None:
                    batch_len = len(obj)
                elif len(obj) != batch_len:
                    raise ValueError(
                        f"auto padding needs equal-length DataProtos; {name} has {len(obj)} rows, not {batch_len}"
                    )
                obj, pad_size = protocol.pad_dataproto_to_divisor(obj, chunks)
            elif len(obj) % chunks != 0:
                raise ValueError(
                    f"{name} has {len(obj)} rows, not divisible by {chunks} workers; make the batch size a multiple "
                    "of the data-parallel size or enable auto padding (meta_info['_verl_auto_padding']=True or "
                    "env VERL_AUTO_PADDING=1)"
                )
        return obj.chunk(chunks=chunks)

    split_args = [split(f"arg {i}", a) for i, a in enumerate(args)]
    split_kwargs = {k: split(f"kwarg '{k}'", v) for k, v in kwargs.items()}
    return split_args, split_kwargs, pad_size


def _with_padding_key(kwargs: dict, pad_size: int | None) -> dict:
    if pad_size is not None:
        kwargs[PADDING_SIZE_KEY] = pad_size
    return kwargs


def dispatch_dp_compute_data_proto(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """Chunk DataProto args ``world_size`` ways (auto padding when enabled)."""
    split_args, split_kwargs, pad_size = _split_data_proto_args(worker_group.world_size, args, kwargs)
    return tuple(split_args), _with_padding_key(split_kwargs, pad_size)


def dispatch_dp_compute_data_proto_with_func(worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """arg0 is a function sent to every worker; the remaining DataProto args are chunked."""
    if not args or not isinstance(args[0], FunctionType):
        raise TypeError("DP_COMPUTE_PROTO_WITH_FUNC needs a function as the first argument")
    split_args, split_kwargs, pad_size = _split_data_proto_args(worker_group.world_size, args[1:], kwargs)
    return tuple([[args[0]] * worker_group.world_size, *split_args]), _with_padding_key(split_kwargs, pad_size)


def _concat_data_proto_or_future(output: list) -> Any:
    """Concat DataProtos, or wrap object refs (non-blocking calls) in one ``DataProtoFuture``."""
    protocol = _protocol()
    if all(isinstance(o, protocol.DataProto) for o in output):
        return protocol.DataProto.concat(output)
    import ray

    if all(isinstance(o, ray.ObjectRef) for o in output):
        return protocol.DataProtoFuture.concat(output)
    kinds = sorted({type(o).__name__ for o in output})
    raise TypeError(f"workers of a DataProto method must return DataProto; got {kinds}")


def collect_dp_compute_data_proto(worker_group: Any, output: list) -> Any:
    return _concat_data_proto_or_future(collect_dp_compute(worker_group, output))


def unpad_output(output: Any, pad_size: int) -> Any:
    """Drop the ``pad_size`` padded rows from a collected output.

    DataProto → its first ``len - pad_size`` rows; DataProtoFuture → trimmed when materialized.
    Lists (per-worker outputs, e.g. DP_COMPUTE_METRIC) are returned unchanged: their items are
    workers, not rows (verl slices such lists, dropping whole workers' results).
    """
    if not pad_size:
        return output
    protocol = _protocol()
    if isinstance(output, protocol.DataProto):
        return protocol.unpad_dataproto(output, pad_size=pad_size)
    if isinstance(output, protocol.DataProtoFuture):
        return protocol.DataProtoFuture(
            collect_fn=partial(_collect_then_unpad, output.collect_fn, pad_size),
            futures=output.futures,
            dispatch_fn=output.dispatch_fn,
        )
    return output


def _collect_then_unpad(collect_fn: Any, pad_size: int, outputs: list) -> Any:
    return _protocol().unpad_dataproto(collect_fn(outputs), pad_size=pad_size)


# ---------------------------------------------------------------------------- mesh-aware (n-d) dispatch


def _mesh_info(worker_group: Any, mesh_name: str) -> tuple[list[int], list[bool]]:
    """Per-rank dp rank and collect flag of ``mesh_name`` (queried once, then cached on the group)."""
    if mesh_name not in worker_group._dispatch_info:
        worker_group._dispatch_info[mesh_name] = list(worker_group._query_dispatch_info(mesh_name))
    if mesh_name not in worker_group._collect_info:
        worker_group._collect_info[mesh_name] = list(worker_group._query_collect_info(mesh_name))
    dp_ranks = worker_group._dispatch_info[mesh_name]
    collect_mask = worker_group._collect_info[mesh_name]
    dp_size = max(dp_ranks) + 1
    if sorted(set(dp_ranks)) != list(range(dp_size)):
        raise ValueError(f"mesh '{mesh_name}': dp ranks {dp_ranks} do not cover 0..{dp_size - 1}")
    collected = sorted(r for r, c in zip(dp_ranks, collect_mask) if c)
    if collected != list(range(dp_size)):
        raise ValueError(
            f"mesh '{mesh_name}': every dp rank must be collected from exactly one worker; "
            f"dp ranks {dp_ranks}, is_collect {collect_mask}"
        )
    return dp_ranks, collect_mask


def dispatch_nd_compute_data_proto(mesh_name: str, worker_group: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """Chunk DataProto args by the mesh's dp size; worker i receives chunk ``dp_rank[i]``.

    Each chunk is stored once (``worker_group._share``, ``ray.put`` on Ray) and shared by the
    tensor-parallel replicas that receive it.
    """
    dp_ranks, _ = _mesh_info(worker_group, mesh_name)
    dp_size = max(dp_ranks) + 1
    split_args, split_kwargs, pad_size = _split_data_proto_args(dp_size, args, kwargs)

    def scatter(chunks: list) -> list:
        shared = [worker_group._share(c) for c in chunks]
        return [shared[dp_rank] for dp_rank in dp_ranks]

    out_args = tuple(scatter(a) for a in split_args)
    out_kwargs = {k: scatter(v) for k, v in split_kwargs.items()}
    return out_args, _with_padding_key(out_kwargs, pad_size)


def collect_nd_compute_data_proto(mesh_name: str, worker_group: Any, output: list) -> Any:
    """Concat the outputs of the collecting workers, in dp-rank order."""
    dp_ranks, collect_mask = _mesh_info(worker_group, mesh_name)
    by_dp_rank = sorted(
        ((dp_rank, out) for dp_rank, out, c in zip(dp_ranks, output, collect_mask) if c), key=lambda pair: pair[0]
    )
    return _concat_data_proto_or_future([out for _, out in by_dp_rank])


def make_nd_compute_dataproto_dispatch_fn(mesh_name: str) -> dict[str, Any]:
    """A dispatch_mode dict for ``@register`` that dispatches by the dp ranks of ``mesh_name``."""
    return {
        "dispatch_fn": partial(dispatch_nd_compute_data_proto, mesh_name),
        "collect_fn": partial(collect_nd_compute_data_proto, mesh_name),
    }
